// Experiment: is rung 3's last 3% to the published shared-memory kernel (8.98 against 9.26
// TFLOP/s at 4096^3 on the H100) the per-tile cost of its any-shape loads, as tile2d_walk.cu asks
// for rung 5? This variant, for row-major inputs only, keeps the shipped math, shared layout and
// block order but loads each tile through per-thread pointers advanced by one tile each step,
// unchecked while the block's tiles lie inside the matrices (checked, as shipped, otherwise). Its
// output must equal the shipped kernel's bit for bit (same FMA order). Median of 15 CUDA-event
// timings after 3 warm-ups, cuBLAS in the run (variant_timing.cuh). Measured against the tree of
// 5290f12 (results/raw/walk-h100.txt): +3% at 4096^3, bit-identical; see tile2d_walk.cu for what
// ships now.
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels -I benchmarks/experiments \
//        benchmarks/experiments/smem_walk.cu kernels/03_smem.cu kernels/fill_random.cu -lcublas -o /tmp/sw
#include <cstdio>

#include "common.cuh"
#include "variant_timing.cuh"

namespace {

constexpr int kTile = 32, kThreads = kTile * kTile;

__global__ void __launch_bounds__(kThreads) smem_walk_kernel(fsg_gemm g) {
    __shared__ float As[kTile][kTile];
    __shared__ float Bs[kTile][kTile];
    const int tid = threadIdx.x, tx = tid % kTile, ty = tid / kTile;
    const fsg::TileCoord tile = fsg::grouped_block_tile();
    const int row0 = tile.row * kTile, col0 = tile.col * kTile;
    const int m = (int)g.m, n = (int)g.n, k = (int)g.k, lda = (int)g.lda, ldb = (int)g.ldb;
    // This thread copies A(row0 + ty, k0 + tx) and B(k0 + ty, col0 + tx).
    const float *a_ptr = g.a + (size_t)(row0 + ty) * lda + tx;
    const float *b_ptr = g.b + (size_t)ty * ldb + col0 + tx;
    const bool inside = row0 + kTile <= m && col0 + kTile <= n;
    const int full_steps = inside ? k / kTile : 0;  // tiles loaded without checks

    float acc = 0.0f;
    for (int k0 = 0, step = 0; k0 < k; k0 += kTile, ++step) {
        if (step < full_steps) {
            As[ty][tx] = *a_ptr;
            Bs[ty][tx] = *b_ptr;
        } else {
            fsg::load_tile<kTile, kTile, kThreads, false, int>(g.a, lda, m, k, row0, k0, tid,
                                                            [&](int r, int c, float v) { As[r][c] = v; });
            fsg::load_tile<kTile, kTile, kThreads, false, int>(g.b, ldb, k, n, k0, col0, tid,
                                                            [&](int r, int c, float v) { Bs[r][c] = v; });
        }
        a_ptr += kTile;
        b_ptr += kTile * ldb;
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kTile; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();
    }
    const int row = row0 + ty, col = col0 + tx;
    if (row < m && col < n) fsg::store_d(g, row, col, acc);
}

}  // namespace

int main() {
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, smem_walk_kernel);
    printf("walk kernel: %d registers, %zu bytes local\n", attr.numRegs, (size_t)attr.localSizeBytes);
    time_variant("smem  ", fsg_smem_sgemm, [](const fsg_gemm &g) {
        const dim3 grid((unsigned)fsg::ceil_div(g.n, kTile), (unsigned)fsg::ceil_div(g.m, kTile));
        smem_walk_kernel<<<grid, kThreads>>>(g);
    });
}
