// What the configuration sweeps in this folder share: CUDA-event timing and a bitwise comparison.
#ifndef FASTSGEMM_EXPERIMENT_HARNESS_CUH
#define FASTSGEMM_EXPERIMENT_HARNESS_CUH

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

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

#endif
