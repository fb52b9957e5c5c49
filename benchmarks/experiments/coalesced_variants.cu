// Experiment (not a rung): why does rung 2 reach half the published coalesced
// kernel's speed on the H100? Times variants of the same kernel, 4096^3,
// row-major, CUDA events, median of 10 after 2 warm-ups. Build and run:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels benchmarks/experiments/coalesced_variants.cu -o /tmp/cv && /tmp/cv
#include <algorithm>
#include <cstdio>
#include <vector>
#include "common.cuh"

// A: rung 2 as it is (x over columns in the block, gridDim.x over column tiles), 64-bit indices.
__global__ void v_rung(fsg_gemm g) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= g.m || col >= g.n) return;
    float acc = 0.0f;
    for (int64_t p = 0; p < g.k; ++p) acc += g.a[row * g.lda + p] * g.b[p * g.ldb + col];
    fsg::store_d(g, row, col, acc);
}
// B: same, 32-bit indices.
__global__ void v_int32(fsg_gemm g) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    const int m = (int)g.m, n = (int)g.n, k = (int)g.k, lda = (int)g.lda, ldb = (int)g.ldb;
    if (row >= m || col >= n) return;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc += g.a[row * lda + p] * g.b[p * ldb + col];
    g.d[row * (int)g.ldd + col] = g.alpha * acc;
}
// C: 64-bit, but gridDim.x over row tiles (the published mapping).
__global__ void v_gridx_rows(fsg_gemm g) {
    const int64_t col = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= g.m || col >= g.n) return;
    float acc = 0.0f;
    for (int64_t p = 0; p < g.k; ++p) acc += g.a[row * g.lda + p] * g.b[p * g.ldb + col];
    fsg::store_d(g, row, col, acc);
}
// D: 32-bit and gridDim.x over row tiles.
__global__ void v_both(fsg_gemm g) {
    const int col = blockIdx.y * blockDim.x + threadIdx.x, row = blockIdx.x * blockDim.y + threadIdx.y;
    const int m = (int)g.m, n = (int)g.n, k = (int)g.k, lda = (int)g.lda, ldb = (int)g.ldb;
    if (row >= m || col >= n) return;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc += g.a[row * lda + p] * g.b[p * ldb + col];
    g.d[row * (int)g.ldd + col] = g.alpha * acc;
}

// E: 64-bit indices with the unrolling the 32-bit loop got by itself.
__global__ void v_unroll16(fsg_gemm g) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= g.m || col >= g.n) return;
    float acc = 0.0f;
#pragma unroll 16
    for (int64_t p = 0; p < g.k; ++p) acc += g.a[row * g.lda + p] * g.b[p * g.ldb + col];
    fsg::store_d(g, row, col, acc);
}

int main() {
    const int n = 4096;
    fsg_gemm g = {n, n, n, 1.0f, 0.0f};
    float *a, *b, *d;
    cudaMalloc(&a, 4ull * n * n); cudaMalloc(&b, 4ull * n * n); cudaMalloc(&d, 4ull * n * n);
    fsg_fill_uniform_cuda(a, (int64_t)n * n, 1, 0); fsg_fill_uniform_cuda(b, (int64_t)n * n, 2, 0);
    g.a = a; g.lda = n; g.b = b; g.ldb = n; g.d = d; g.ldd = n;
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const dim3 block(32, 32), by_cols(n / 32, n / 32);
    struct { const char *name; void (*k)(fsg_gemm); } variants[] = {
        {"rung 2 as is (64-bit, grid.x = column tiles)", v_rung}, {"32-bit indices", v_int32},
        {"grid.x = row tiles", v_gridx_rows}, {"32-bit and grid.x = row tiles", v_both},
        {"64-bit, #pragma unroll 16", v_unroll16}};
    for (auto &v : variants) {
        std::vector<float> ms;
        for (int r = 0; r < 12; ++r) {
            cudaEventRecord(e0); v.k<<<by_cols, block>>>(g); cudaEventRecord(e1); cudaEventSynchronize(e1);
            float t; cudaEventElapsedTime(&t, e0, e1); if (r >= 2) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        printf("%-48s %8.2f ms %8.0f GFLOP/s  (%s)\n", v.name, ms[ms.size() / 2], 2.0 * n * n * n / ms[ms.size() / 2] / 1e6,
               cudaGetErrorString(cudaGetLastError()));
    }
}
