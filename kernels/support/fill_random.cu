/*
 * fill_random.cu: not a rung. Fills device memory with uniform random floats
 * in [-1, 1) from a counter-based hash, so benchmarks never run on zeros and
 * a 16384^2 input needs no host round trip. Deterministic for a seed.
 */
#include "common.cuh"

namespace {

// A 64-bit mix (splitmix64's finaliser): consecutive counters give unrelated bits.
__device__ __forceinline__ uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__global__ void fill_uniform_kernel(float *data, int64_t count, uint64_t seed) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const uint32_t bits = (uint32_t)(mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i) >> 40);  // 24 bits
        data[i] = (float)bits * (2.0f / 16777216.0f) - 1.0f;
    }
}

}  // namespace

extern "C" cudaError_t fsg_fill_uniform_cuda(float *data, int64_t count, uint64_t seed, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    constexpr int kThreads = 256;
    const int64_t blocks = fsg::ceil_div(count, kThreads);
    fill_uniform_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(data, count, seed);
    return cudaGetLastError();  // launch configuration errors show only here
}
