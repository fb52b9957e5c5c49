#!/usr/bin/env bash
# Experiment: rung 5 (tile2d) with its k-step loop fully unrolled and one block per SM (149-168
# registers, no spills), against the shipped loop (not unrolled, two blocks per SM, <= 128
# registers). Builds the grid_order.cu harness twice, with kernels/05_tile2d.cu as it is and with
# the variant; the other rungs are as they are. Run from the repository root on a GPU machine
# (BUILD_ONLY=1: build into $BUILD and stop, to carry the binaries to one).
set -euo pipefail
build=${BUILD:-$(mktemp -d)}
flags=(-O3 -std=c++17 -arch=sm_90 -I kernels -I benchmarks/experiments)
others=(kernels/03_smem.cu kernels/04_tile1d.cu kernels/06_vectorized.cu kernels/07_bankfree.cu
        kernels/08_doublebuffer.cu kernels/09_warptile.cu kernels/fill_random.cu)
sed 's/#pragma unroll 1/#pragma unroll/; s/constexpr int kMinBlocksPerSM = 2;/constexpr int kMinBlocksPerSM = 1;/' \
    kernels/05_tile2d.cu >"$build/tile2d_unrolled.cu"
grep -q "kMinBlocksPerSM = 1;" "$build/tile2d_unrolled.cu"  # the variant really differs
nvcc "${flags[@]}" benchmarks/experiments/grid_order.cu kernels/05_tile2d.cu "${others[@]}" -lcublas \
    -o "$build/tile2d-loop" &
nvcc "${flags[@]}" -I "$build" benchmarks/experiments/grid_order.cu "$build/tile2d_unrolled.cu" "${others[@]}" \
    -lcublas -o "$build/tile2d-unrolled" &
wait
[ -n "${BUILD_ONLY:-}" ] && exit 0
"$build/tile2d-loop" tile2d-loop
"$build/tile2d-unrolled" tile2d-unrolled
