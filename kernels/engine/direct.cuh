/*
 * engine/direct.cuh: what the direct paths share (kernel="tf32x3:direct",
 * kernels/engine/tf32x3_direct.cu; kernel="tf32x3_regs:direct",
 * kernels/engine/tf32x3_regs_direct.cu). A direct path has no pack pass: two
 * producer warpgroups copy raw tiles of the caller's matrices into shared
 * memory and split them there into hi and lo (split_rn, as the pack pass
 * does), in wgmma's operand layout, for the consumers of the rung they extend.
 *
 * The conversion: a producer thread owns 16-byte chunks of the operand tile,
 * four consecutive k of one row (m of A, n of B), one STS.128 each for hi and
 * lo. The raw tile lies as the matrix does. Where k is its contiguous
 * direction a chunk is one LDS.128, and a quarter warp (8 lanes) takes the 8
 * chunks of one row: all 32 banks on both sides. Where rows are contiguous a
 * warp's lanes take one chunk of 32 consecutive rows (four LDS.32, each a
 * whole 128-byte line); a quarter warp then stores 8 consecutive rows of one
 * chunk column, whose swizzled positions differ.
 */
#ifndef FASTSGEMM_ENGINE_DIRECT_CUH
#define FASTSGEMM_ENGINE_DIRECT_CUH

#include "engine/pack.cuh"  // split_rn, and through it the pipeline and operand_offset

namespace fsg {
namespace hopper {
namespace direct {

// Two producer warpgroups: the copies' address arithmetic and the split are a few hundred instructions a tile
// for each producer thread, and one warp per SM sub-partition could not issue them fast enough.
constexpr int kDirectProducers = 256, kDirectThreads = kDirectProducers + kConsumerThreads;
constexpr int kDirectProducerRegisters = 88, kDirectConsumerRegisters = 168;  // no spills either side
static_assert(kDirectProducers * kDirectProducerRegisters + kConsumerThreads * kDirectConsumerRegisters <=
                  kDirectThreads * 128,
              "the block starts with 128 registers a thread (__launch_bounds__(512, 1))");

/* The producer warpgroups' own barrier (named barrier 1; __syncthreads is 0). */
__device__ __forceinline__ void producer_sync() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kDirectProducers) : "memory");
}

/* Where chunk j of producer thread p lies in a ROWS-row tile: row r, k = 4 c .. 4 c + 3. */
template <int ROWS, bool ALONG_K>
__device__ __forceinline__ void chunk_place(int p, int j, int &r, int &c) {
    const int q = p + kDirectProducers * j;
    if constexpr (ALONG_K) {  // 8 lanes take a row's 8 chunks
        r = q / 8;
        c = q % 8;
    } else {  // 32 lanes take one chunk column of 32 rows
        r = q % ROWS;
        c = q / ROWS;
    }
}

/* Splits producer thread p's chunks of a raw ROWS x kBK tile (element (row, k)
 * at raw[row * kBK + k] when ALONG_K, else raw[k * ROWS + row]) into the
 * operand tiles hi and lo. */
template <int ROWS, bool ALONG_K>
__device__ __forceinline__ void split_tile(const float *raw, float *hi, float *lo, int p) {
#pragma unroll
    for (int j = 0; j < ROWS * kBK / 4 / kDirectProducers; ++j) {
        int r, c;
        chunk_place<ROWS, ALONG_K>(p, j, r, c);
        float x[4];
        if constexpr (ALONG_K) {
            const float4 v = *reinterpret_cast<const float4 *>(raw + r * kBK + 4 * c);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) x[e] = raw[(4 * c + e) * ROWS + r];
        }
        uint32_t h[4], l[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split_rn(x[e], h[e], l[e]);
        const int at = operand_offset(r, 4 * c);  // the chunk's 16 bytes are contiguous, 16-byte aligned
        *reinterpret_cast<uint4 *>(hi + at) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4 *>(lo + at) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

}  // namespace direct
}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_DIRECT_CUH
