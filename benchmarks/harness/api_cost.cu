// benchmarks/harness/api_cost: the host time of the runtime and driver calls a product makes, each called 20000
// times in a loop after 1000 warm-ups, wall clock over the loop: the per-call budget of issue 48 in pieces.
//     nvcc -O2 -std=c++17 -arch=sm_90 benchmarks/harness/api_cost.cu -o api_cost -lcuda && ./api_cost
// Launches are of an empty kernel on a created stream, with and without a 200 KiB dynamic shared-memory request;
// "setattr + launch" raises the kernel's limit before each launch, as every wgmma launch did before smem_limit.c.
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
__global__ void k(float *p) { extern __shared__ float s[]; if (p) p[threadIdx.x] = s[threadIdx.x]; }
template <typename F> double per_call(F f, int n = 20000) {
    for (int i = 0; i < 1000; ++i) f();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}
int main() {
    cudaFree(0);
    float *d; cudaMalloc(&d, 1 << 20);
    cudaStream_t st; cudaStreamCreate(&st);
    printf("cudaFuncSetAttribute(MaxDynamicSharedMemorySize): %.3f us\n", per_call([&] { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024); }));
    printf("cudaFuncGetAttributes: %.3f us\n", per_call([&] { cudaFuncAttributes a; cudaFuncGetAttributes(&a, k); }));
    printf("cuCtxGetCurrent: %.3f us\n", per_call([&] { CUcontext c; cuCtxGetCurrent(&c); }));
    printf("cuCtxGetId: %.3f us\n", per_call([&] { CUcontext c; cuCtxGetCurrent(&c); unsigned long long id; cuCtxGetId(c, &id); }));
    printf("cuPointerGetAttribute(range start): %.3f us\n", per_call([&] { CUdeviceptr b; cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)d + 64); }));
    printf("cudaGetDevice: %.3f us\n", per_call([&] { int dev; cudaGetDevice(&dev); }));
    printf("cudaMallocAsync+FreeAsync 64 KiB: %.3f us\n", per_call([&] { void *p; cudaMallocAsync(&p, 65536, st); cudaFreeAsync(p, st); }));
    printf("launch (empty, 1 block, 200 KiB smem): %.3f us\n", per_call([&] { k<<<1, 32, 200 * 1024, st>>>(nullptr); }));
    printf("launch (empty, 1 block, 0 smem): %.3f us\n", per_call([&] { k<<<1, 32, 0, st>>>(nullptr); }));
    printf("setattr + launch: %.3f us\n", per_call([&] { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024); k<<<1, 32, 200 * 1024, st>>>(nullptr); }));
    cudaStreamSynchronize(st);
    printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
}
