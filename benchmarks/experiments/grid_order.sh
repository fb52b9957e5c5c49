#!/usr/bin/env bash
# Builds and runs grid_order.cu once per block order: rungs 3-9 as they are, with blockIdx.x and
# .y swapped inside their kernels, and grouped by 8, 16 and 32 block rows (see grid_order.cu).
# Run from the repository root on a machine with a GPU.
set -euo pipefail
build=$(mktemp -d)
rungs=(03_smem 04_tile1d 05_tile2d 06_vectorized 07_bankfree 08_doublebuffer 09_warptile)
flags=(-O3 -std=c++17 -arch=sm_90 -I kernels -I benchmarks/experiments)
variant_build() {  # variant name, then the lines that go between common.cuh and the rung
    local name=$1 sources=()
    shift
    for r in "${rungs[@]}"; do
        { echo '#include "common.cuh"'; printf '%s\n' "$@"; echo "#include \"$r.cu\""; } >"$build/${name}_$r.cu"
        sources+=("$build/${name}_$r.cu")
    done
    nvcc "${flags[@]}" benchmarks/experiments/grid_order.cu "${sources[@]}" kernels/fill_random.cu -lcublas \
        -o "$build/$name"
}
variant_build as-is &
variant_build swapped '#define blockIdx make_uint3(blockIdx.y, blockIdx.x, blockIdx.z)' &
for g in 8 16 32; do
    variant_build "grouped$g" "#define GROUP_ROWS $g" '#include "grouped_order.cuh"' '#define blockIdx grouped_block_idx()' &
done
wait
for v in as-is swapped grouped8 grouped16 grouped32; do "$build/$v" "$v"; done
