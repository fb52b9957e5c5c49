// Experiment: is rung 5's gap to the published 2-D tiling kernel (24.5 against 26.0 TFLOP/s at
// 4096^3 on the H100) the per-tile cost of its any-shape loads? In SASS the shipped kernel spends
// about 110 instructions per k-tile outside its 8 k-steps (bounds compares, index products and 17
// constant reloads at its 128-register cap) beside 648 inside them. This variant, for row-major
// aligned inputs only, keeps the shipped math and shared layout but loads each tile through
// per-thread pointers advanced by one tile each step, unchecked while the block's tiles lie inside
// the matrices (checked, as shipped, otherwise). Its output must equal the shipped kernel's bit for
// bit (same order of FMAs). Median of 15 CUDA-event timings after 3 warm-ups, cuBLAS in the run
// (variant_timing.cuh). Measured against the tree of 5290f12 (results/raw/walk-h100.txt): +5% at
// 4096^3 and 8192^3, bit-identical; the branch-free form of this, fsg::SlidingTile, now ships in
// rungs 3 and 5 (sliding_tile.sh), so a run today compares against it.
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels -I benchmarks/experiments \
//        benchmarks/experiments/tile2d_walk.cu kernels/05_tile2d.cu kernels/fill_random.cu -lcublas -o /tmp/tw
#include <cstdio>

#include "common.cuh"
#include "variant_timing.cuh"

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8, kThreads = 256;
constexpr int kPerThread = kBM * kBK / kThreads;  // A and B tiles both hold 1024 floats: 4 per thread
static_assert(kBK * kBN / kThreads == kPerThread, "the same count from each operand");

__global__ void __launch_bounds__(kThreads, 2) tile2d_walk_kernel(fsg_gemm g) {
    __shared__ float As[kBM][kBK];
    __shared__ float Bs[kBK][kBN];
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const fsg::TileCoord tile = fsg::grouped_block_tile();
    const int row0 = tile.row * kBM, col0 = tile.col * kBN;
    const int m = (int)g.m, n = (int)g.n, k = (int)g.k, lda = (int)g.lda, ldb = (int)g.ldb;
    // Element i of this thread: A(row0 + a_row + 32 i, k0 + a_col) and B(k0 + b_row + 2 i, col0 + b_col).
    const int a_row = tid / kBK, a_col = tid % kBK, b_row = tid / kBN, b_col = tid % kBN;
    const float *a_ptr = g.a + (size_t)(row0 + a_row) * lda + a_col;
    const float *b_ptr = g.b + (size_t)b_row * ldb + col0 + b_col;
    const bool inside = row0 + kBM <= m && col0 + kBN <= n;
    const int full_steps = inside ? k / kBK : 0;  // tiles loaded without checks

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    for (int k0 = 0, step = 0; k0 < k; k0 += kBK, ++step) {
        if (step < full_steps) {
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
                As[a_row + i * (kThreads / kBK)][a_col] = a_ptr[i * (kThreads / kBK) * lda];
                Bs[b_row + i * (kThreads / kBN)][b_col] = b_ptr[i * (kThreads / kBN) * ldb];
            }
        } else {
            fsg::load_tile<kBM, kBK, kThreads, false, int>(g.a, lda, m, k, row0, k0, tid,
                                                            [&](int r, int c, float v) { As[r][c] = v; });
            fsg::load_tile<kBK, kBN, kThreads, false, int>(g.b, ldb, k, n, k0, col0, tid,
                                                            [&](int r, int c, float v) { Bs[r][c] = v; });
        }
        a_ptr += kBK;
        b_ptr += kBK * ldb;
        __syncthreads();
#pragma unroll 1
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int i = 0; i < kTM; ++i) reg_m[i] = As[thread_row * kTM + i][p];
#pragma unroll
            for (int j = 0; j < kTN; ++j) reg_n[j] = Bs[p][thread_col * kTN + j];
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int row = row0 + thread_row * kTM + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const int col = col0 + thread_col * kTN + j;
            if (row < m && col < n) fsg::store_d(g, row, col, acc[i][j]);
        }
    }
}

}  // namespace

int main() {
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, tile2d_walk_kernel);
    printf("walk kernel: %d registers, %zu bytes local\n", attr.numRegs, (size_t)attr.localSizeBytes);
    time_variant("tile2d", fsg_tile2d_sgemm, [](const fsg_gemm &g) {
        const dim3 grid((unsigned)fsg::ceil_div(g.n, kBN), (unsigned)fsg::ceil_div(g.m, kBM));
        tile2d_walk_kernel<<<grid, kThreads>>>(g);
    });
}
