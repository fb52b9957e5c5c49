// benchmarks/harness/fixup_cost.cu: what a second kernel after every product would cost (issue 45, part 2).
//     nvcc -O3 -std=c++17 -arch=sm_90 benchmarks/harness/fixup_cost.cu -o fixup_cost && ./fixup_cost
// The one form of the subnormal fix that leaves the tensor-core kernels' k-loops as they are (benchmarks/NOTES.md,
// "The subnormal gap: where a flag may live in the kernel") writes a flag after the tile loop, and a second kernel
// reads it and recomputes the flagged results. That second kernel runs after every product, flagged or not. This
// measures its cost on the stream without any of fastsgemm: a stand-in for the product (a persistent grid, one
// block of 384 threads an SM that holds the SM's shared memory, busy for a set time), back to back in a loop, with
// and without a one-block kernel after each that waits for it (griddepcontrol.wait) and reads one word.
// Per iteration: CUDA events around 200 iterations after 20 warm-ups, the median of 9 such loops, each variant in
// turn. Variants: the product alone; + the reader launched overlapped (programmatic dependent launch, as the
// engine launches); + the reader launched plainly.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                                      \
    do {                                                                                              \
        cudaError_t e_ = (x);                                                                         \
        if (e_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            return 1;                                                                                 \
        }                                                                                             \
    } while (0)

constexpr int kThreads = 384;
constexpr size_t kSmem = 200 * 1024;  // one block an SM, as the wgmma kernels

// The product's stand-in: spins for `cycles` clock cycles, lets the next grid launch early, writes a flag word.
__global__ void __launch_bounds__(kThreads, 1) product(long long cycles, int *flag, int raise) {
    extern __shared__ float smem[];
    asm volatile("griddepcontrol.wait;" ::: "memory");  // after the previous iteration's reader
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const long long start = clock64();
    float x = threadIdx.x;
    while (clock64() - start < cycles) x = x * 1.000001f + 1e-7f;
    smem[threadIdx.x] = x;
    if (raise && threadIdx.x == 0 && blockIdx.x == 0) flag[0] = 1;  // a flagged product (never, in the timing)
}

// The reader: one block that waits for the product and reads its flag; a flagged product would be recomputed here.
__global__ void reader(const int *flag, int *seen) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0 && flag[0] != 0) seen[0] += 1;
}

template <typename... Params, typename... Args>
cudaError_t launch(bool overlapped, void (*kernel)(Params...), int blocks, int threads, size_t smem, cudaStream_t st,
                   Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = st;
    config.attrs = attr;
    config.numAttrs = overlapped ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

int main() {
    int sms, clock_khz;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    CHECK(cudaFuncSetAttribute(product, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
    int *flag, *seen;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&seen, sizeof(int)));
    CHECK(cudaMemset(flag, 0, sizeof(int)));
    CHECK(cudaMemset(seen, 0, sizeof(int)));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::printf("%d SMs; per iteration, us (median of 9 loops of 200)\n", sms);
    std::printf("%10s %12s %16s %14s %12s %12s\n", "busy us", "product", "+ reader (PDL)", "+ reader", "PDL cost", "cost %");
    for (double busy_us : {10.0, 20.0, 40.0, 100.0, 1000.0}) {
        const long long cycles = (long long)(busy_us * clock_khz / 1000.0);
        std::vector<double> t[3];
        for (int round = 0; round < 9; ++round)
            for (int variant = 0; variant < 3; ++variant) {
                auto iteration = [&]() -> cudaError_t {
                    cudaError_t e = launch(true, product, sms, kThreads, kSmem, st, cycles, flag, 0);
                    if (e == cudaSuccess && variant > 0) e = launch(variant == 1, reader, 1, 32, 0, st, (const int *)flag, seen);
                    return e;
                };
                for (int i = 0; i < 20; ++i) CHECK(iteration());
                CHECK(cudaEventRecord(a, st));
                for (int i = 0; i < 200; ++i) CHECK(iteration());
                CHECK(cudaEventRecord(b, st));
                CHECK(cudaEventSynchronize(b));
                float ms;
                CHECK(cudaEventElapsedTime(&ms, a, b));
                t[variant].push_back(ms * 1000.0 / 200);
            }
        double med[3];
        for (int v = 0; v < 3; ++v) {
            std::sort(t[v].begin(), t[v].end());
            med[v] = t[v][t[v].size() / 2];
        }
        std::printf("%10.0f %12.2f %16.2f %14.2f %12.2f %11.2f%%\n", busy_us, med[0], med[1], med[2], med[1] - med[0],
                    100.0 * (med[1] - med[0]) / med[0]);
    }
    int seen_host;
    CHECK(cudaMemcpy(&seen_host, seen, sizeof(int), cudaMemcpyDeviceToHost));
    std::printf("flagged products seen: %d (0 expected)\n", seen_host);
    return 0;
}
