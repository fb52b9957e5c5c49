// Experiment: is rung 5's gap to the published 2-D tiling kernel (24.5 against 26.0 TFLOP/s at
// 4096^3 on the H100) the per-tile cost of its any-shape loads? In SASS the shipped kernel spends
// about 110 instructions per k-tile outside its 8 k-steps (bounds compares, index products and 17
// constant reloads at its 128-register cap) beside 648 inside them. This variant, for row-major
// aligned inputs only, keeps the shipped math and shared layout but loads each tile through
// per-thread pointers advanced by one tile each step, unchecked while the block's tiles lie inside
// the matrices (checked, as shipped, otherwise). Its output must equal the shipped kernel's bit for
// bit (same order of FMAs). Median of 15 CUDA-event timings after 3 warm-ups, cuBLAS in the run.
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels -I benchmarks/experiments \
//        benchmarks/experiments/tile2d_walk.cu kernels/05_tile2d.cu kernels/fill_random.cu -lcublas -o /tmp/tw
#include <cstdio>

#include <cublas_v2.h>

#include "common.cuh"
#include "harness.cuh"

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
    cublasHandle_t handle;
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);  // true FP32, no TF32
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, tile2d_walk_kernel);
    printf("walk kernel: %d registers, %zu bytes local\n", attr.numRegs, (size_t)attr.localSizeBytes);
    const int64_t shapes[][3] = {{2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192}, {4095, 4097, 4093}};
    for (auto &s : shapes) {
        RowMajorProblem problem(s[0], s[1], s[2]);
        fsg_gemm g = problem.g;
        const double flop = 2.0 * g.m * g.n * g.k;
        const float one = 1.0f, zero = 0.0f;
        const float cublas_ms = median_ms([&] {
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.n, (int)g.m, (int)g.k, &one, g.b, (int)g.ldb, g.a,
                        (int)g.lda, &zero, problem.scratch, (int)g.ldd);
        }, 15);
        const float shipped_ms = median_ms([&] { fsg_tile2d_sgemm(&g, 0); }, 15);  // writes the reference
        g.d = problem.scratch;
        cudaMemset(problem.scratch, 0xff, sizeof(float) * g.m * g.n);  // NaN: unwritten elements show
        const dim3 grid((unsigned)fsg::ceil_div(g.n, kBN), (unsigned)fsg::ceil_div(g.m, kBM));
        const float walk_ms = median_ms([&] { tile2d_walk_kernel<<<grid, kThreads>>>(g); }, 15);
        const size_t differ = count_differences(problem.scratch, problem.reference, g.m * g.n);
        printf("%5lldx%5lldx%5lld  cuBLAS %6.2f  shipped tile2d %6.2f (%.1f%%)  walk %6.2f (%.1f%%) TFLOP/s  "
               "differing %zu  %s\n", (long long)g.m, (long long)g.n, (long long)g.k, flop / cublas_ms / 1e9,
               flop / shipped_ms / 1e9, 100 * cublas_ms / shipped_ms, flop / walk_ms / 1e9, 100 * cublas_ms / walk_ms,
               differ, cudaGetErrorString(cudaGetLastError()));
    }
    cublasDestroy(handle);
}
