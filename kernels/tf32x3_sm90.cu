/*
 * The Hopper path of rung 11 (tf32x3): wgmma, built for sm_90a only
 * (setup.py's FILE_ARCHS). Its launcher calls it on devices of compute
 * capability 9.0 and keeps the mma.sync path for Ampere and Ada.
 *
 * mma.sync is a warp's instruction and feeds the tensor cores from registers
 * that every lane loads from shared memory first. Hopper's wgmma is issued by
 * a warpgroup (4 warps, 128 threads), reads its operands straight from shared
 * memory through descriptors and runs asynchronously: a 64 x 128 x 8 product
 * per instruction while the threads do something else. On the H100 the
 * mma.sync kernels reach about 140 TFLOP/s of TF32; cuBLAS's wgmma kernels 400.
 *
 * wgmma takes TF32 operands only "K-major": rows of A (m) and of B^T (n) with
 * k contiguous, in 8-row x 16-byte core matrices, and each operand has to be
 * split into hi and lo before the tensor cores see it. So a tile passes
 * through two places in shared memory:
 *   1. staging, three slots deep: the tile as it lies in global memory,
 *      brought by TMA (cp.async.bulk.tensor: one thread, two instructions
 *      per tile, zero fill past the edges) when the matrices are 16-byte
 *      aligned, by 4-byte cp.async otherwise;
 *   2. operands, two buffers: hi and lo of A and of B, K-major, which the
 *      conversion pass writes. It also transposes an operand whose m or n is
 *      contiguous, so every layout takes the same route.
 *
 * Warp specialization. The block has three warpgroups. The producer (128
 * threads) copies and converts; it keeps 104 registers and hands the rest to
 * the two consumers (setmaxnreg), which do nothing but wgmma on a 64 x 128
 * slice each and the FADDs of the main term, with 192 accumulators a thread.
 * They meet at mbarriers: `full` (a buffer is converted) and `empty` (its
 * wgmmas have finished reading it). Conversion and copies of later tiles thus
 * run while the tensor cores work, and while one consumer adds its main term
 * the other's wgmmas keep the tensor cores busy. The first version of this
 * kernel had all eight warps copy, convert, wait for the wgmma group and
 * meet at two __syncthreads per tile: 41% of the tensor pipe, 67 TFLOP/s at
 * 4096^3; this one about 90 (benchmarks/NOTES.md).
 *
 * The split uses Hopper's own round-to-nearest conversion to TF32 (one F2FP
 * instruction); rung 11's cvt.rna compiles to a compare and two integer ones, and the
 * conversion pass is the producer's main cost.
 *
 * Operand layout: wgmma's 128-byte swizzle (kernels/hopper.cuh), in which
 * a K-major tile lands from TMA directly.
 *
 * The sums follow rung 11: the main term hi_a hi_b of each BK-deep tile
 * comes out of the tensor core into a temporary and is added to the running
 * sum with FP32 FADDs (round to nearest); the corrections accumulate inside.
 *
 * Block tile 128 x 128 x 32; 224 KiB of shared memory (operands 128, staging
 * 96), one block per SM. Limits: m <= 65535 * 128. Next: A from registers
 * (wgmma's RS form) would halve the operand stores; a 128 x 256 tile needs
 * fewer accumulator sets than three.
 */
#include "hopper.cuh"
#include "tensorcore.cuh"

namespace fsg {
namespace hopper {
namespace tf32x3 {

constexpr int kBM = 128, kBN = 128;
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgRows = 64;                           // rows of D per warpgroup
constexpr int kOperandFloats = kBM * kBK;             // one K-major operand tile (A or B, BM == BN)

/* x = hi + lo, both TF32, with round_tf32 (nearest even; rung 11 rounds ties
 * away). Only ties round differently, and the split is as exact either way. */
__device__ __forceinline__ void split_rn(float x, uint32_t &hi, uint32_t &lo) {
    hi = round_tf32(x);
    lo = round_tf32(x - __uint_as_float(hi));
}

/* Where element (row, k) of a staged tile sits; row is m for A, n for B. A
 * tile whose k is contiguous in global memory (ALONG_K) is staged exactly as
 * an operand tile is laid out, rows of 32 k with swizzled 16-byte chunks (the
 * copy engine's 128-byte swizzle), so the conversion reads and writes the
 * same position; the other kind is staged as kBK rows of 128 m or n. Both
 * keep a warp's copies and the conversion's reads on 32 different banks. */
template <bool ALONG_K>
__device__ __forceinline__ int staged_offset(int row, int k) {
    if constexpr (ALONG_K) return operand_offset(row, k);
    else return k * kBM + row;
}

/* One staged operand tile (kBM rows, kBK deep) into K-major core matrices,
 * split into hi and lo, by the producer's 128 threads, UNROLL chunks at a time. */
template <bool ALONG_K, int UNROLL>
__device__ __forceinline__ void convert_tile(const float *staged, float *hi, float *lo, int ptid) {
    constexpr int kChunks = kBM * kBK / 4;  // four k of one row each
#pragma unroll UNROLL
    for (int i = 0; i < kChunks / kProducerThreads; ++i) {
        const int chunk = ptid + i * kProducerThreads, row = chunk % kBM, k4 = chunk / kBM;
        const int to = operand_offset(row, 4 * k4);
        float v[4];
        if constexpr (ALONG_K) {
            load4(staged + to, v);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = staged[staged_offset<false>(row, 4 * k4 + e)];
        }
        uint32_t h[4], l[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split_rn(v[e], h[e], l[e]);
        *reinterpret_cast<uint4 *>(hi + to) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4 *>(lo + to) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

constexpr int kStagingSlots = 3;  // tiles in flight from global memory
constexpr int kBuffers = 2;       // converted operand buffers between producer and consumers
constexpr int kSets = 4;          // operand tiles per buffer: A hi, B hi, A lo, B lo
// Registers per thread after setmaxnreg: 128 x 104 + 256 x 200 fits the 384 x 168 the block starts with.
constexpr int kProducerRegisters = 104, kConsumerRegisters = 200;
constexpr size_t kSmemBytes = sizeof(float) * ((size_t)kBuffers * kSets * kOperandFloats +
                                               (size_t)kStagingSlots * 2 * kOperandFloats) +
                              (kStagingSlots + 2 * kBuffers) * sizeof(uint64_t);

/* How tiles reach the staging slots: TMA (one thread issues two bulk tensor
 * copies per tile; the copy engine zero-fills past the edges) for matrices it
 * can describe, 16-byte aligned with m, n and k within int range; otherwise
 * 4-byte cp.async by all 128 producer threads. */
enum class Copy { tma, cp_async_4 };

template <typename Index, bool A_TRANS, bool B_TRANS, Copy COPY>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_kernel(fsg_gemm g, const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b) {
    constexpr bool kAlongKA = !A_TRANS, kAlongKB = B_TRANS;  // k contiguous in global memory
    extern __shared__ __align__(1024) float4 smem[];          // swizzle atoms must be 1024-byte aligned
    float *const operands = reinterpret_cast<float *>(smem);  // [kBuffers][kSets][kOperandFloats]
    float *const staging = operands + kBuffers * kSets * kOperandFloats;  // [kStagingSlots][A, B][kOperandFloats]
    uint64_t *const staged = reinterpret_cast<uint64_t *>(staging + kStagingSlots * 2 * kOperandFloats);
    uint64_t *const full = staged + kStagingSlots, *const empty = full + kBuffers;
    // Operand set s of buffer b: 0 A hi, 1 B hi, 2 A lo, 3 B lo.
    auto operand = [&](int buffer, int set) { return operands + (buffer * kSets + set) * kOperandFloats; };

    const int tid = threadIdx.x, warpgroup = tid / 128;
    // Each role computes the block's corner after its setmaxnreg, and tests the tile index against g.k,
    // a kernel parameter: a value held in a register across that instruction gets spilled.
    auto corner = [&](Index &row0, Index &col0) {
        row0 = (Index)blockIdx.y * kBM;
        col0 = (Index)blockIdx.x * kBN;
    };
    auto in_k = [&](Index t) { return t * kBK < (Index)g.k; };  // tile t exists

    if (tid == 0) {
        for (int s = 0; s < kStagingSlots; ++s) mbarrier_init(&staged[s], 1);  // the copying thread, plus bytes
        for (int b = 0; b < kBuffers; ++b) {
            mbarrier_init(&full[b], kProducerThreads);   // every producer thread, after its conversion
            mbarrier_init(&empty[b], kConsumerThreads);  // every consumer thread, after its wgmmas
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();

    if (warpgroup == 0) {
        // Producer: global memory -> staging slot -> split into hi and lo in an operand buffer.
        registers_down<kProducerRegisters>();
        const int ptid = tid;
        Index row0, col0;
        corner(row0, col0);
        auto fetch = [&](Index t) {  // tile t into staging slot t % kStagingSlots
            float *as = staging + (int)(t % kStagingSlots) * 2 * kOperandFloats, *bs = as + kOperandFloats;
            if constexpr (COPY == Copy::tma) {
                if (ptid == 0 && in_k(t)) {
                    uint64_t *bar = &staged[t % kStagingSlots];
                    mbarrier_arrive_expect(bar, 2 * kOperandFloats * sizeof(float));
                    const int kk = (int)(t * kBK);
                    tma_load(as, &map_a, kAlongKA ? kk : (int)row0, kAlongKA ? (int)row0 : kk, bar);
                    tma_load(bs, &map_b, kAlongKB ? kk : (int)col0, kAlongKB ? (int)col0 : kk, bar);
                }
            } else {
                if (in_k(t)) {
                    copy_tile_async<kBM, kBK, kProducerThreads, A_TRANS, false, Index>(
                        g.a, g.lda, (Index)g.m, (Index)g.k, row0, t * kBK, ptid,
                        [&](int r, int c) { return as + staged_offset<kAlongKA>(r, c); });
                    copy_tile_async<kBK, kBN, kProducerThreads, B_TRANS, false, Index>(
                        g.b, g.ldb, (Index)g.k, (Index)g.n, t * kBK, col0, ptid,
                        [&](int r, int c) { return bs + staged_offset<kAlongKB>(c, r); });
                }
                cp_async_commit();  // always one group per tile, even an empty one
            }
        };
#pragma unroll 1
        for (int s = 0; s < kStagingSlots - 1; ++s) fetch(s);
        for (Index t = 0; in_k(t); ++t) {
            if constexpr (COPY == Copy::tma) {
                producer_sync();  // everyone is done converting tile t - 1: its slot may be refilled
                fetch(t + kStagingSlots - 1);
                mbarrier_wait(&staged[t % kStagingSlots], (int)((t / kStagingSlots) & 1));
            } else {
                cp_async_wait<kStagingSlots - 2>();  // this thread's copies of tile t have landed
                producer_sync();  // everyone's have; and everyone is done converting tile t - 1
                fetch(t + kStagingSlots - 1);  // into the slot tile t - 1 left
            }
            const int buffer = (int)(t % kBuffers);
            if (t >= kBuffers) mbarrier_wait(&empty[buffer], (int)((t / kBuffers - 1) & 1));
            const float *as = staging + (int)(t % kStagingSlots) * 2 * kOperandFloats, *bs = as + kOperandFloats;
            // The cp.async path keeps its addresses in registers; a shorter unroll leaves it room.
            constexpr int kUnroll = COPY == Copy::tma ? 8 : 4;
            convert_tile<kAlongKA, kUnroll>(as, operand(buffer, 0), operand(buffer, 2), ptid);
            convert_tile<kAlongKB, kUnroll>(bs, operand(buffer, 1), operand(buffer, 3), ptid);
            fence_proxy_async();  // the tensor cores read what these stores wrote
            mbarrier_arrive(&full[buffer]);
        }
    } else {
        // Consumers: a 64 x 128 slice of the block tile each, nothing but wgmma and the main term's FADDs.
        registers_up<kConsumerRegisters>();
        Index row0, col0;
        corner(row0, col0);
        const int consumer = warpgroup - 1, warp = (tid % 128) / 32, lane = tid % 32;
        float corr[64] = {};  // the corrections, summed by the tensor core
        float main[64] = {};  // the main term's running sum (FADD)
        float part[64];       // this tile's main term, out of the tensor core
        for (Index t = 0; in_k(t); ++t) {
            const int buffer = (int)(t % kBuffers);
            mbarrier_wait(&full[buffer], (int)((t / kBuffers) & 1));
            const float *a_hi = operand(buffer, 0) + consumer * kWgRows * kBK;
            const float *b_hi = operand(buffer, 1);
            const float *a_lo = operand(buffer, 2) + consumer * kWgRows * kBK;
            const float *b_lo = operand(buffer, 3);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < kBK / 8; ++s) {  // k-steps of 8: 32 bytes along each 128-byte row
                const uint64_t da = descriptor(a_hi + 8 * s), db = descriptor(b_hi + 8 * s);
                wgmma_64x128x8(part, da, db, s > 0);
                wgmma_64x128x8(corr, descriptor(a_lo + 8 * s), db, 1);
                wgmma_64x128x8(corr, da, descriptor(b_lo + 8 * s), 1);
            }
            wgmma_commit();
            wgmma_wait_all();
            touch(corr);
            touch(part);
            mbarrier_arrive(&empty[buffer]);  // this buffer's reads are done: the producer may refill it
            // The other consumer's wgmmas keep the tensor cores busy while these FADDs run.
#pragma unroll
            for (int i = 0; i < 64; ++i) main[i] += part[i];
        }

        // Accumulator i of a thread: n8 block i / 4, element i % 4 of the m16n8 fragment layout.
        const int group = lane / 4, quad = lane % 4;
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            const Index row = row0 + consumer * kWgRows + warp * 16 + group + 8 * ((i % 4) / 2);
            const Index col = col0 + 8 * (i / 4) + 2 * quad + i % 2;
            if (row < g.m && col < g.n) store_d(g, row, col, tensorcore::combine(main[i], corr[i]));
        }
    }
}

cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    // TMA coordinates are int32; a matrix past that keeps cp.async.
    const bool fits = g->m < INT32_MAX && g->n < INT32_MAX && g->k < INT32_MAX;
    CUtensorMap map_a{}, map_b{};
    const bool tma = vec && fits && encode(&map_a, g->a, g->lda, g->m, g->k, !g->a_trans, kBM) &&
                     encode(&map_b, g->b, g->ldb, g->n, g->k, g->b_trans, kBN);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = tma ? wgmma_tf32x3_kernel<I, kA, kB, Copy::tma> : wgmma_tf32x3_kernel<I, kA, kB, Copy::cp_async_4>;
        launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, *g, map_a, map_b);
    });
}

}  // namespace tf32x3
}  // namespace hopper
}  // namespace fsg

extern "C" cudaError_t fsg_tf32x3_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::tf32x3::launch(g, stream);
}
