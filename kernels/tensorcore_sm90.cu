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
 * Operand layout, wgmma's 128-byte swizzle: with BK = 32 a row of an operand
 * tile (32 TF32 values) is exactly 128 bytes, and 8 rows make a 1024-byte
 * atom; the 16-byte chunk c of row r sits at chunk position c ^ (r % 8) of its
 * row. The XOR spreads both the conversion's stores and the tensor cores'
 * reads of one k-slice over all banks. Atoms of 8 rows are 1024 bytes apart
 * (the descriptor's stride byte offset); a k-step of 8 moves the start
 * address by 32 bytes, and the hardware applies the same XOR. TMA's 128-byte
 * swizzle is the same pattern, so a K-major tile lands in staging already in
 * operand layout.
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
#include <cuda.h>  // CUtensorMap
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "tensorcore.cuh"

namespace fsg {
namespace hopper {

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgRows = 64;                           // rows of D per warpgroup
constexpr int kAtomBytes = 1024;                      // 8 rows of 128 bytes: one swizzle atom
static_assert(kBK * 4 == 128, "the 128-byte swizzle wants rows of exactly 128 bytes");
constexpr int kOperandFloats = kBM * kBK;             // one K-major operand tile (A or B, BM == BN)

/* A pointer into shared memory as the 32-bit shared-window address PTX instructions take. */
__device__ __forceinline__ uint32_t smem_address(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* The shared-memory matrix descriptor of wgmma for a K-major operand in the
 * 128-byte swizzle: start address and the atoms' stride in 16-byte units,
 * swizzle mode 1 in bits 62-63 (the leading byte offset is unused there). */
__device__ __forceinline__ uint64_t descriptor(const float *smem) {
    const uint32_t address = smem_address(smem);
    return (uint64_t)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(kAtomBytes >> 4) << 32) | (1ull << 62);
}

/* d (+)= A * B for a 64 x 128 x 8 tile: A from descriptor a, B^T from b. With
 * accumulate == 0 the old d is ignored. */
__device__ __forceinline__ void wgmma_64x128x8(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
        "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Shared memory written by ordinary stores, read next by wgmma (the async proxy). */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Tells the compiler the asynchronous wgmma may have changed d: no read of d moves above the wait. */
__device__ __forceinline__ void touch(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* mbarriers in shared memory: a phase completes when `count` arrivals have
 * come (and, for a copy's barrier, the bytes it expects have landed); waiters
 * name the phase by its parity (0, 1, 0, ...). An arrive releases this
 * thread's earlier writes, a completed wait acquires them. */
__device__ __forceinline__ void mbarrier_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
/* Arrives and tells the barrier that `bytes` more will land by bulk copies before its phase can complete. */
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool mbarrier_try_wait(uint64_t *bar, int parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbarrier_wait(uint64_t *bar, int parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
}
/* A barrier among the producer warpgroup only (named barrier 1; 0 is __syncthreads'). */
__device__ __forceinline__ void producer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
/* Hands registers from the producer warpgroup to the consumers (sm_90a). */
template <int N>
__device__ __forceinline__ void registers_down() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void registers_up() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

/* The bulk tensor copy (TMA) of the box at element (x, y) of the 2-D tensor
 * `map` describes, x the contiguous coordinate, into shared memory at dst;
 * elements past the tensor's edges arrive as zeros. Completes on bar. */
__device__ __forceinline__ void tma_load(float *dst, const CUtensorMap *map, int x, int y, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(smem_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(smem_address(bar))
        : "memory");
}

/* x = hi + lo, both TF32, rounded to nearest even by Hopper's own conversion
 * (one F2FP instruction; rung 11's cvt.rna is four integer ones). Only ties
 * round differently, and the split is as exact either way. */
__device__ __forceinline__ void split_rn(float x, uint32_t &hi, uint32_t &lo) {
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(x));
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
}

/* Where element (row, k) of a staged tile sits; row is m for A, n for B. A
 * tile whose k is contiguous in global memory (ALONG_K) is staged exactly as
 * an operand tile is laid out, rows of 32 k with swizzled 16-byte chunks (the
 * copy engine's 128-byte swizzle), so the conversion reads and writes the
 * same position; the other kind is staged as kBK rows of 128 m or n. Both
 * keep a warp's copies and the conversion's reads on 32 different banks. */
template <bool ALONG_K>
__device__ __forceinline__ int staged_offset(int row, int k) {
    if constexpr (ALONG_K) return row * kBK + (((k / 4) ^ (row % 8)) * 4) + k % 4;
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
        const int to = staged_offset<true>(row, 4 * k4);  // operand layout: row of 32 floats, chunk swizzled
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

/* cuTensorMapEncodeTiled, a driver function, found through the runtime once. */
using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;
static EncodeTiled encoder() {
    static const EncodeTiled fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            p = nullptr;
        return reinterpret_cast<EncodeTiled>(p);
    }();
    return fn;
}

/* The tensor map of one operand: its tiles are kBM (m or n) by kBK (k). With
 * k contiguous (along_k) a box is 128 rows of 32 k, 128 bytes each, landing
 * in the 128-byte swizzle; otherwise 32 rows of 128 m or n, unswizzled. */
static bool encode(CUtensorMap *map, const float *p, int64_t ld, int64_t mn, int64_t k, bool along_k) {
    const EncodeTiled fn = encoder();
    if (fn == nullptr) return false;
    const cuuint64_t dims[2] = {(cuuint64_t)(along_k ? k : mn), (cuuint64_t)(along_k ? mn : k)};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * sizeof(float)};
    const cuuint32_t box[2] = {(cuuint32_t)(along_k ? kBK : kBM), (cuuint32_t)(along_k ? kBM : kBK)};
    const cuuint32_t unit[2] = {1, 1};
    return fn(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float *>(p), dims, strides, box, unit,
              CU_TENSOR_MAP_INTERLEAVE_NONE, along_k ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    // TMA coordinates are int32; a matrix past that keeps cp.async.
    const bool fits = g->m < INT32_MAX && g->n < INT32_MAX && g->k < INT32_MAX;
    CUtensorMap map_a{}, map_b{};
    const bool tma = vec && fits && encode(&map_a, g->a, g->lda, g->m, g->k, !g->a_trans) &&
                     encode(&map_b, g->b, g->ldb, g->n, g->k, g->b_trans);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = tma ? wgmma_tf32x3_kernel<I, kA, kB, Copy::tma> : wgmma_tf32x3_kernel<I, kA, kB, Copy::cp_async_4>;
        launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, *g, map_a, map_b);
    });
}

}  // namespace hopper
}  // namespace fsg

extern "C" cudaError_t fsg_tf32x3_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::launch(g, stream);
}
