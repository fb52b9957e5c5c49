/*
 * common.cuh: helpers shared by the CUDA rungs. Each lives here once.
 */
#ifndef FASTSGEMM_COMMON_CUH
#define FASTSGEMM_COMMON_CUH

#include <cstdint>
#include <cuda_runtime.h>

#include "ladder.h"

namespace fsg {

/* Number of tiles of size `tile` needed to cover `n` elements. */
__host__ __device__ constexpr int64_t ceil_div(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }

/* A(i, p) of the m x k operand A, whichever of the two layouts it has.
 * 64-bit index arithmetic: m * lda may exceed 2^31 elements. */
__device__ __forceinline__ float load_a(const fsg_gemm &g, int64_t i, int64_t p) {
    return g.a_trans ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
}

/* B(p, j) of the k x n operand B. */
__device__ __forceinline__ float load_b(const fsg_gemm &g, int64_t p, int64_t j) {
    return g.b_trans ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j];
}

/* The epilogue every rung shares: D(i, j) = alpha * acc + beta * C(i, j).
 * C is only read when beta != 0 (it is NULL otherwise), so NaN in an unused C
 * never leaks into D. */
__device__ __forceinline__ void store_d(const fsg_gemm &g, int64_t i, int64_t j, float acc) {
    float result = g.alpha * acc;
    if (g.c != nullptr) result += g.beta * g.c[i * g.ldc + j];
    g.d[i * g.ldd + j] = result;
}

/* Launch bookkeeping: a launch reports configuration errors only through
 * cudaGetLastError(), so every launcher ends with this. */
inline cudaError_t launch_status() { return cudaGetLastError(); }

}  // namespace fsg

#endif /* FASTSGEMM_COMMON_CUH */
