#!/usr/bin/env bash
# One device call: build, time stacks for auto's table on GPU 0, the benchmarks on GPU 0, and the whole suite.
#   OUT=dir FASTSGEMM_GIT_COMMIT=abc1234 [FULL_TUNE=1] [STEPS="tune batched suite"] \
#       bash benchmarks/device_check.sh 2>&1 | tee $OUT/run.log
# FULL_TUNE=1 times every default shape as well as the stacks (a GPU whose entry is stale): minutes more, so
# on one GPU split the work over two calls of the same warm machine, STEPS="tune batched" and then, with the
# returned tuning.json copied into python/fastsgemm/ here, STEPS=suite (the build is kept between calls).
# Steps (the default is "tune batched suite"): tune (stacks timed for auto's table), batched
# (benchmarks/batched.py), overhead (python -m fastsgemm.bench --overhead: the per-call table), layouts
# (benchmarks/stack_layouts.py), torch (tests/test_torch.py, fast_call_cost.py --linear, torch_layer.py --compile),
# ozaki (benchmarks/ozaki_classes.py), suite. Everything it measures or logs lands in $OUT: build.log, tune.log,
# tuning.json (this GPU's entry with what was timed merged in), batched.json, overhead.json, stack-layouts.json,
# suite-1.log, suite-2.log; the benchmarks' own output goes to the standard output (run.log). With run.log that
# is nine files where every step runs, and the device tool returns eight: leave a step to a second call.
# With two GPUs (nvidia-h100-x2, nvidia-h200-x2) the suite runs in two processes at once: process 2 sees
# GPU 1 alone and runs the single-GPU files; process 1 sees both GPUs and runs the files that use two GPUs
# or fill a GPU's memory, after the timing on GPU 0, so that no memory-filling test and no timed run shares
# a GPU with other work. The host is shared, though: the batched benchmark's small stacks are host-bound and
# ran 40-50% slower beside process 2 (benchmarks/NOTES.md), so quote batched figures from a one-GPU run, and
# the per-call and layout figures too (the per-call mode is host time itself).
# With one GPU everything runs in turn. FASTSGEMM_GIT_COMMIT names the commit in what tune and the benchmark
# write, where the device's copy of .git is older than its tree. The exit status is 0 only when every step ran
# and every test passed.
set -uo pipefail
: "${OUT:?set OUT to the folder for logs}"
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1

steps=" ${STEPS:-tune batched suite} "
wants() { [[ $steps == *" $1 "* ]]; }
for step in $steps; do
    case "$step" in
        tune|batched|overhead|layouts|torch|ozaki|suite) ;;
        *) echo "STEPS: no step named '$step' (tune, batched, overhead, layouts, torch, ozaki, suite)" >&2; exit 1 ;;
    esac
done

if ls wheels/*.whl >/dev/null 2>&1; then  # Dask, which the device image lacks
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)

start=$(date +%s)
FASTSGEMM_CUDA_ARCHS=${FASTSGEMM_CUDA_ARCHS:-90} python3 -m pip install --no-build-isolation --no-deps -e . \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

# fastsgemm.tune's default shapes or stacks (NAME: DEFAULT_SHAPES or DEFAULT_STACKS) as its command line writes them.
tune_defaults() {
    python3 -c "from fastsgemm.tune import $1 as S; print(' '.join('x'.join(map(str, s)) for s in S))"
}

# Stacks are timed as stacks (fastsgemm.tune) and merged into this GPU's entry; the other shapes are kept.
tune() {
    local stacks=() sizes=() start
    read -ra stacks < <(tune_defaults DEFAULT_STACKS)
    [ "${#stacks[@]}" -gt 0 ] || { echo "tune: the default stacks could not be read" >&2; return 1; }
    if [ "${FULL_TUNE:-0}" = 1 ]; then
        read -ra sizes < <(tune_defaults DEFAULT_SHAPES)
        sizes=(--sizes "${sizes[@]}")
    fi
    cp python/fastsgemm/tuning.json "$OUT/tuning.json"
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=0 python3 -m fastsgemm.tune "${sizes[@]}" --stacks "${stacks[@]}" --merge --output "$OUT/tuning.json" \
        >"$OUT/tune.log" 2>&1 || { tail -20 "$OUT/tune.log"; return 1; }
    echo "tune: $(( $(date +%s) - start )) s"
    grep -A40 "compute capability" "$OUT/tune.log" | grep -v "^\["
    cp "$OUT/tuning.json" python/fastsgemm/tuning.json  # the benchmark and the suite run with the new table
}

batched() {
    CUDA_VISIBLE_DEVICES=0 python3 benchmarks/batched.py --out "$OUT/batched.json" 2>&1
}

overhead() {
    CUDA_VISIBLE_DEVICES=0 python3 -m fastsgemm.bench --overhead --out "$OUT/overhead" 2>&1
}

layouts() {
    CUDA_VISIBLE_DEVICES=0 python3 benchmarks/stack_layouts.py --out "$OUT/stack-layouts.json" 2>&1
}

# fastsgemm.torch (issue 48): its tests, the no-grad Linear taken apart, and torch_layer.py eager and compiled
# (torch-layer.json: copy it to benchmarks/results/torch-layer-h100.json from an H100 run, then readme_tables.py).
torch() {
    CUDA_VISIBLE_DEVICES=0 python3 -m pytest -q -p no:cacheprovider tests/test_torch.py >"$OUT/test-torch.log" 2>&1
    local status=$?
    echo "tests/test_torch.py: $(tail -1 "$OUT/test-torch.log")"
    CUDA_VISIBLE_DEVICES=0 python3 benchmarks/fast_call_cost.py --linear 2>&1 || status=1
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 300 python3 benchmarks/torch_layer.py --compile --out "$OUT/torch-layer.json" \
        2>&1 | grep -v "Warning\|warnings.warn" || status=1
    return "$status"
}

# ozaki on every input class of issue 47 at 4096^3 and 16384^3 (a few minutes; ozaki-classes.json).
ozaki() {
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 480 python3 benchmarks/ozaki_classes.py --out "$OUT/ozaki-classes.json" 2>&1
}

# The benchmarks STEPS names, in turn on GPU 0, each timed.
measure() {
    local step start status=0
    for step in batched overhead layouts torch ozaki; do
        wants "$step" || continue
        start=$(date +%s)
        "$step" || status=1
        echo "$step: $(( $(date +%s) - start )) s"
    done
    return "$status"
}

# The whole suite but the compiler checks (CI runs those). With two GPUs, the single-GPU files start at once on
# GPU 1 and the rest wait for the benchmarks on GPU 0.
suite() {
    local run=(python3 -m pytest -q -rs -p no:cacheprovider --ignore=tests/test_compiled_kernels.py)
    local two_gpu_files=(tests/test_multi_gpu.py tests/test_dask.py tests/test_device_memory.py
                         tests/test_reliability.py tests/test_device_arrays.py tests/test_testing_module.py
                         tests/test_threads.py)
    local ignores=() f second status=0
    for f in "${two_gpu_files[@]}"; do ignores+=(--ignore="$f"); done
    if [ "$gpus" -ge 2 ]; then
        CUDA_VISIBLE_DEVICES=1 "${run[@]}" "${ignores[@]}" tests >"$OUT/suite-2.log" 2>&1 &
        second=$!
    fi
    measure || status=1
    "${run[@]}" "${two_gpu_files[@]}" >"$OUT/suite-1.log" 2>&1 || status=1
    echo "suite, process 1 (two-GPU and memory-filling files): $(tail -1 "$OUT/suite-1.log")"
    if [ "$gpus" -ge 2 ]; then
        wait "$second" || status=1
    else
        "${run[@]}" "${ignores[@]}" tests >"$OUT/suite-2.log" 2>&1 || status=1
    fi
    echo "suite, process 2 (the rest$([ "$gpus" -ge 2 ] && echo ', on GPU 1')): $(tail -1 "$OUT/suite-2.log")"
    grep -h "FAILED\|ERROR" "$OUT"/suite-*.log | head -30 || true  # grep finds nothing when all passed
    return "$status"
}

if wants tune; then tune || exit 1; fi
if wants suite; then
    suite
else
    measure
fi
