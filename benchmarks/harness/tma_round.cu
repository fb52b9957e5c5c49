// Does a tensor copy through a map of type TF32 round FP32 to TF32 as the tile lands in shared memory, and how?
// One 64 x 32 tile of FP32 whose low 13 bits are random (a quarter of them exact ties, an eighth negative, and a
// subnormal, the largest float and a NaN with a payload), copied by the copy engine through maps of type FLOAT32,
// TFLOAT32 and TFLOAT32_FTZ, read back, and compared bit for bit with four candidates: unchanged, rounded to
// nearest with ties to even, to nearest with ties away, truncated. The answer decides rung 23 (tf32_tma).
//     nvcc -arch=sm_90a -o tma_round benchmarks/harness/tma_round.cu && ./tma_round
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

constexpr int kWidth = 32, kHeight = 64, kCount = kWidth * kHeight;

__global__ void copy_through(const __grid_constant__ CUtensorMap map, float *out) {
    __shared__ __align__(1024) float tile[kCount];
    __shared__ __align__(8) uint64_t landed;
    const uint32_t tile_at = (uint32_t)__cvta_generic_to_shared(tile);
    const uint32_t bar_at = (uint32_t)__cvta_generic_to_shared(&landed);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_at));
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_at), "r"(kCount * 4));
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
            ::"r"(tile_at), "l"(&map), "r"(0), "r"(0), "r"(bar_at)
            : "memory");
    }
    asm volatile("{ .reg .pred done; wait: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0; @!done bra wait; }"
                 ::"r"(bar_at));
    for (int i = threadIdx.x; i < kCount; i += blockDim.x) out[i] = tile[i];
}

using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

int main() {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess || found != cudaDriverEntryPointSuccess) {
        printf("no tensor-map encoder\n");
        return 1;
    }
    const EncodeTiled encode = (EncodeTiled)fn;
    float input[kCount];
    std::mt19937 draw(7);
    for (int i = 0; i < kCount; ++i) {
        uint32_t u = 0x3f800000u | (draw() & 0x7fffffu);   // [1, 2), random low bits
        if (i % 4 == 1) u = (u & ~0x1fffu) | 0x1000u;      // exactly halfway between two TF32 values
        if (i % 8 == 2) u |= 0x80000000u;                  // negative
        if (i == 5) u = 0x00000fffu;                       // a subnormal
        if (i == 6) u = 0x7f7fffffu;                       // the largest float
        if (i == 7) u = 0x7fc00001u;                       // a NaN with a payload in the dropped bits
        memcpy(&input[i], &u, 4);
    }
    float *in, *out;
    if (cudaMalloc(&in, sizeof input) != cudaSuccess || cudaMalloc(&out, sizeof input) != cudaSuccess) return 1;
    cudaMemcpy(in, input, sizeof input, cudaMemcpyHostToDevice);
    const CUtensorMapDataType types[3] = {CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
                                          CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ};
    const char *names[3] = {"FLOAT32", "TFLOAT32", "TFLOAT32_FTZ"};
    for (int t = 0; t < 3; ++t) {
        CUtensorMap map;
        const cuuint64_t sizes[2] = {kWidth, kHeight}, strides[1] = {kWidth * 4};
        const cuuint32_t box[2] = {kWidth, kHeight}, unit[2] = {1, 1};
        if (encode(&map, types[t], 2, in, sizes, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
            printf("%s: the encoder refused the map\n", names[t]);
            continue;
        }
        cudaMemset(out, 0xff, sizeof input);
        copy_through<<<1, 128>>>(map, out);
        const cudaError_t err = cudaDeviceSynchronize();
        if (err != cudaSuccess) {
            printf("%s: %s\n", names[t], cudaGetErrorString(err));
            return 1;
        }
        float landed[kCount];
        cudaMemcpy(landed, out, sizeof landed, cudaMemcpyDeviceToHost);
        int unchanged = 0, even = 0, away = 0, truncated = 0, none = 0;
        for (int i = 0; i < kCount; ++i) {
            const uint32_t u = bits_of(input[i]), got = bits_of(landed[i]);
            const uint32_t to_even = (u + 0x0fffu + ((u >> 13) & 1)) & ~0x1fffu;
            const uint32_t to_away = (u + 0x1000u) & ~0x1fffu, to_zero = u & ~0x1fffu;
            unchanged += got == u;
            even += got == to_even;
            away += got == to_away;
            truncated += got == to_zero;
            none += got != u && got != to_even && got != to_away && got != to_zero;
            if (i >= 5 && i < 8) printf("  %s: %08x lands as %08x\n", names[t], u, got);
        }
        printf("%s: of %d values, unchanged %d, nearest-even %d, nearest-away %d, truncated %d, none of these %d\n",
               names[t], kCount, unchanged, even, away, truncated, none);
    }
    return 0;
}
