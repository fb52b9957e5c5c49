#!/usr/bin/env bash
# Experiment: rungs 3-5 loading their tiles through fsg::SlidingTile (walked pointers, and
# distances to the edges counted down), against the same rungs at $BASE (load_tile on every tile:
# index products and full bounds checks each time); the other rungs are as they are. Builds the
# grid_order.cu harness (every output checked against cuBLAS) per variant. Run from the repository
# root; BUILD_ONLY=1 builds into $BUILD and stops, to carry the binaries to a GPU machine, and
# RUN_ONLY=1 runs binaries built so. results/raw/sliding-tile-h100.txt was measured when rung 4 used
# SlidingTile too (+2.5% at 4096^3); it has gone back to load_tile since (registers: NOTES.md), so a
# run today times rung 4 the same way in both builds.
set -euo pipefail
build=${BUILD:-$(mktemp -d)}
base=${BASE:-5290f12}
flags=(-O3 -std=c++17 -arch=sm_90 -I kernels -I benchmarks/experiments)
rest=(kernels/06_vectorized.cu kernels/07_bankfree.cu kernels/08_doublebuffer.cu kernels/09_warptile.cu
      kernels/fill_random.cu)
if [ -z "${RUN_ONLY:-}" ]; then
    mkdir -p "$build/base"
    for r in 03_smem 04_tile1d 05_tile2d; do git show "$base:kernels/$r.cu" >"$build/base/$r.cu"; done
    nvcc "${flags[@]}" benchmarks/experiments/grid_order.cu "$build"/base/0[345]*.cu "${rest[@]}" -lcublas \
        -o "$build/load-tile" &
    nvcc "${flags[@]}" benchmarks/experiments/grid_order.cu kernels/0[345]*.cu "${rest[@]}" -lcublas \
        -o "$build/sliding" &
    wait
fi
[ -n "${BUILD_ONLY:-}" ] && exit 0
for round in 1 2; do
    for v in load-tile sliding; do "$build/$v" "$v" | grep -E "cublas|smem|tile1d|tile2d"; done
done
