// What the variant experiments (tile2d_walk.cu, smem_walk.cu) share: a shipped rung and a variant of
// its kernel timed beside cuBLAS on row-major problems, the variant's output compared bit for bit.
#ifndef FASTSGEMM_EXPERIMENT_VARIANT_TIMING_CUH
#define FASTSGEMM_EXPERIMENT_VARIANT_TIMING_CUH

#include <cstdio>

#include <cublas_v2.h>

#include "harness.cuh"

// For 2048^3, 4096^3, 8192^3 and 4095x4097x4093: median of 15 CUDA-event timings after 3 warm-ups of
// cuBLAS (true FP32), shipped(&g) and launch_variant(g), and how many outputs of the variant differ
// from the shipped rung's (its output is poisoned with NaN first, so unwritten elements count).
template <typename Variant>
void time_variant(const char *rung, cudaError_t (*shipped)(const fsg_gemm *, cudaStream_t), Variant &&launch_variant) {
    cublasHandle_t handle;
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);  // true FP32, no TF32
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
        const float shipped_ms = median_ms([&] { shipped(&g, 0); }, 15);  // writes the reference
        g.d = problem.scratch;
        cudaMemset(problem.scratch, 0xff, sizeof(float) * g.m * g.n);  // NaN: unwritten elements show
        const float variant_ms = median_ms([&] { launch_variant(g); }, 15);
        const size_t differ = count_differences(problem.scratch, problem.reference, g.m * g.n);
        printf("%5lldx%5lldx%5lld  cuBLAS %6.2f  shipped %s %6.2f (%.1f%%)  walk %6.2f (%.1f%%) TFLOP/s  "
               "differing %zu  %s\n", (long long)g.m, (long long)g.n, (long long)g.k, flop / cublas_ms / 1e9, rung,
               flop / shipped_ms / 1e9, 100 * cublas_ms / shipped_ms, flop / variant_ms / 1e9,
               100 * cublas_ms / variant_ms, differ, cudaGetErrorString(cudaGetLastError()));
    }
    cublasDestroy(handle);
}

#endif
