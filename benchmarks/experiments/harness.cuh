// What the configuration sweeps in this folder share: CUDA-event timing and a bitwise comparison.
#ifndef FASTSGEMM_EXPERIMENT_HARNESS_CUH
#define FASTSGEMM_EXPERIMENT_HARNESS_CUH

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "../../kernels/ladder.h"

// Median time in ms of `repeats` calls of launch(), each between two CUDA events, after `warmup` calls.
template <typename Launch>
float median_ms(Launch &&launch, int repeats, int warmup = 3) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int r = 0; r < warmup + repeats; ++r) {
        cudaEventRecord(e0);
        launch();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        if (r >= warmup) ms.push_back(t);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// How many of `count` floats differ (NaN counts as different) between two device buffers.
inline size_t count_differences(const float *a, const float *b, size_t count) {
    std::vector<float> x(count), y(count);
    cudaMemcpy(x.data(), a, sizeof(float) * count, cudaMemcpyDeviceToHost);
    cudaMemcpy(y.data(), b, sizeof(float) * count, cudaMemcpyDeviceToHost);
    size_t differ = 0;
    for (size_t i = 0; i < count; ++i) differ += !(x[i] == y[i]);
    return differ;
}

// A random row-major problem D = A B (uniform inputs, fixed seeds) with leading dimensions padded
// to multiples of 4, so the aligned (float4, cp.async) instantiations apply. g.d points at
// `reference`; `scratch` is the same size, for the runs compared against it.
struct RowMajorProblem {
    float *a = nullptr, *b = nullptr, *reference = nullptr, *scratch = nullptr;
    fsg_gemm g;

    RowMajorProblem(int64_t m, int64_t n, int64_t k) {
        const int64_t lda = (k + 3) / 4 * 4, ldb = (n + 3) / 4 * 4;
        cudaMalloc(&a, sizeof(float) * m * lda);
        cudaMalloc(&b, sizeof(float) * k * ldb);
        cudaMalloc(&reference, sizeof(float) * m * n);
        cudaMalloc(&scratch, sizeof(float) * m * n);
        fsg_fill_uniform_cuda(a, m * lda, 1, 0);
        fsg_fill_uniform_cuda(b, k * ldb, 2, 0);
        g = {m, n, k, 1.0f, 0.0f, a, lda, false, b, ldb, false, nullptr, 0, reference, n};
    }
    ~RowMajorProblem() {
        cudaFree(a);
        cudaFree(b);
        cudaFree(reference);
        cudaFree(scratch);
    }
    RowMajorProblem(const RowMajorProblem &) = delete;
    RowMajorProblem &operator=(const RowMajorProblem &) = delete;
};

#endif
