#!/usr/bin/env bash
# Experiment: rungs 6 and 7 fetching both operands' tiles into registers before storing either to
# shared memory (fsg::load_tiles_vec4), against $BASE, where each operand was fetched and stored in
# turn (load_tile_vec4). cuobjdump of $BASE shows A's 128-bit load in a branch (vector or checked
# element loads) whose reconvergence comes before A's stores, so B's load is issued only after A's
# has landed: two memory latencies per tile, one after the other. Builds the grid_order.cu harness
# (every output checked against cuBLAS) from $BASE's kernels/ and from the working tree's. Run from
# the repository root; BUILD_ONLY=1 builds into $BUILD and stops, RUN_ONLY=1 runs binaries built so.
set -euo pipefail
build=${BUILD:-$(mktemp -d)}
base=${BASE:-281a457}
flags=(-O3 -std=c++17 -arch=sm_90 -I benchmarks/experiments)
rungs=(03_smem 04_tile1d 05_tile2d 06_vectorized 07_bankfree 08_doublebuffer 09_warptile fill_random)
if [ -z "${RUN_ONLY:-}" ]; then
    mkdir -p "$build/base"
    git archive "$base" kernels | tar -x -C "$build/base"
    nvcc "${flags[@]}" -I "$build/base/kernels" benchmarks/experiments/grid_order.cu \
        $(printf "$build/base/kernels/%s.cu " "${rungs[@]}") -lcublas -o "$build/fetch-store-each" &
    nvcc "${flags[@]}" -I kernels benchmarks/experiments/grid_order.cu $(printf "kernels/%s.cu " "${rungs[@]}") \
        -lcublas -o "$build/fetch-both-first" &
    wait
fi
[ -n "${BUILD_ONLY:-}" ] && exit 0
for round in 1 2; do
    for v in fetch-store-each fetch-both-first; do "$build/$v" "$v" | grep -E "cublas|vectorized|bankfree"; done
done
