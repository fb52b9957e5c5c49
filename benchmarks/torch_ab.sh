#!/usr/bin/env bash
# One device call for a change to fastsgemm.torch alone (issue 48): build, the torch tests, then the MLP step
# (benchmarks/torch_step_profile.py --time-only) with the fastsgemm.torch before and after the change, alternated
# in separate processes, each timing torch.nn.Linear against fastsgemm.torch.Linear in its own process; then
# benchmarks/torch_layer.py the same way. Before the call, write the old module where this script finds it:
#     git show main:python/fastsgemm/torch.py > .torch_before.py
# and pass it to the device tool in `carry` (it is git-ignored), with the wheels.
#     OUT=dir [BEFORE=.torch_before.py] [ROUNDS=2] [FASTSGEMM_GIT_COMMIT=abc1234] bash benchmarks/torch_ab.sh
# The old module runs from a copy of the package (python/fastsgemm with torch.py replaced and the built
# extension beside it), first on PYTHONPATH; each benchmark prints which fastsgemm.torch it imported.
set -uo pipefail
: "${OUT:?set OUT to the folder for logs}"
cd "$(dirname "$0")/.." || exit 1  # the repository root; relative paths below are taken from here
OUT=$(realpath "$OUT") || exit 1
before=$(realpath "${BEFORE:-.torch_before.py}" 2>/dev/null)
[ -f "$before" ] || { echo "torch_ab: no ${BEFORE:-.torch_before.py} (git show main:python/fastsgemm/torch.py)" >&2; exit 1; }
if ls wheels/*.whl >/dev/null 2>&1; then  # Dask and the notebook's packages, which the device image lacks
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/*.whl wheels/*/*.whl \
        >/dev/null 2>&1 || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
start=$(date +%s)
FASTSGEMM_CUDA_ARCHS=${FASTSGEMM_CUDA_ARCHS:-90} python3 -m pip install --no-build-isolation --no-deps -e . \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
extension=$(python3 -c "import fastsgemm._sgemm as m; print(m.__file__)") || exit 1
old=$(mktemp -d)
cp -r python/fastsgemm "$old/" && cp "$before" "$old/fastsgemm/torch.py" || exit 1
[ -f "$old/fastsgemm/$(basename "$extension")" ] || cp "$extension" "$old/fastsgemm/" || exit 1
PYTHONPATH=$old:${PYTHONPATH:-} python3 -c "import fastsgemm.torch as f, sys; sys.exit(not f.__file__.startswith('$old'))" \
    || { echo "torch_ab: the copy of the package before is not the one imported" >&2; exit 1; }
status=0
python3 -m pytest -q -p no:cacheprovider tests/test_torch.py >"$OUT/test-torch.log" 2>&1 || status=1
echo "tests/test_torch.py: $(tail -1 "$OUT/test-torch.log")"
for round in $(seq "${ROUNDS:-2}"); do
    for which in before after; do
        path=$([ "$which" = before ] && echo "$old:" || echo "")${PYTHONPATH:-}
        PYTHONPATH=$path python3 benchmarks/torch_step_profile.py --time-only >"$OUT/step-$which-$round.txt" 2>&1 || status=1
        echo "MLP step, $which, round $round: $(grep '^step:' "$OUT/step-$which-$round.txt")"
    done
done
for which in before after; do
    path=$([ "$which" = before ] && echo "$old:" || echo "")${PYTHONPATH:-}
    PYTHONPATH=$path python3 benchmarks/torch_layer.py --out "$OUT/torch-layer-$which.json" >"$OUT/layer-$which.txt" 2>&1 \
        || status=1
    echo "torch_layer.py, $which:"; cat "$OUT/layer-$which.txt"
done
exit "$status"
