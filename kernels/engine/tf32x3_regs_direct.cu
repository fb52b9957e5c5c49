/*
 * engine/tf32x3_regs_direct.cu: configuration "direct" of rung 21
 * (kernel="tf32x3_regs:direct"): no pack pass at all. Also what rung 22
 * (tf32x3_inplace) runs where its tensor copies cannot read the operands.
 *
 * Rung 20's direct path (tf32x3:direct) skips the pack pass: its producer
 * warpgroups copy raw tiles of A and B into shared memory by cp.async and
 * split both into hi and lo there. Their instructions set its pace (62-70
 * TFLOP/s at any size; benchmarks/NOTES.md). With A split in the consumers'
 * registers the producers split only B: 64 x 32 values a tile against 192 x
 * 32, for the same 128 x 64 tile. A's raw tiles go to the consumers as they
 * landed, which changes their lifetime: a raw tile is read by the consumers,
 * not by the producers, so it is given back on a barrier of its own
 * (a_read: every consumer thread arrives once its fragments are in
 * registers), and the raw ring is deeper than the copies run ahead
 * (kRawSlots > kCopiesAhead + 1). With these depths the wait never blocks:
 * the slot a producer refills at tile t held tile t - 4, whose stage it
 * already waited to be read (empty) before splitting tile t - 1; a_read
 * keeps the ring correct for any depths.
 * Persistent grid, copies and epilogue as rung 20's direct path
 * (kernels/engine/tf32x3_direct.cu).
 */

#include "engine/simt.cuh"         // cp.async and the bounds-checked tile copy
#include "engine/tf32x3_regs.cuh"  // the consumers' split of A in registers, the sums, the epilogue
#include "engine/direct.cuh"         // the producers' split of B

namespace fsg {
namespace hopper {
namespace tf32x3_regs {

// The SIMT engine's copies (engine/simt.cuh): 16-byte cp.async where a tile is inside an aligned matrix.
using engine::aligned16;
using engine::copy_tile_async;
using engine::cp_async16;
using engine::cp_async_commit;
using engine::cp_async_wait;
using engine::Vec4Tile;

constexpr int kDirectBN = 64;
constexpr int kDirectStages = 3;  // B hi and lo, split by the producers, read by wgmma
constexpr int kRawSlots = 6, kCopiesAhead = 2;
static_assert(kRawSlots > kCopiesAhead + 1,
              "a producer refills the raw slot of tile t + kCopiesAhead - kRawSlots while the slowest may still split "
              "tile t - 1's B: the two must differ");
using direct::kDirectConsumerRegisters;
using direct::kDirectProducerRegisters;
using direct::kDirectProducers;
using direct::kDirectThreads;
using direct::producer_sync;
using direct::split_tile;
constexpr int kDirectBPart = kDirectBN * kBK;                    // B hi or B lo of one stage
constexpr int kDirectStageFloats = 2 * kDirectBPart;             // B hi, B lo
constexpr int kRawFloats = kBM * kBK + kBK * kDirectBN;          // raw A (raw_a_offset), then raw B as it lies

/* Shared memory: B's stages and their barriers (start_ring), the raw ring, then its a_read barriers. */
struct DirectLayout {
    static constexpr size_t kStagesBytes = pipeline_smem_bytes(kDirectStages, kDirectStageFloats);
    static constexpr size_t kRawOffset = (kStagesBytes + 127) / 128 * 128;
    static constexpr size_t kReadOffset = kRawOffset + (size_t)kRawSlots * kRawFloats * sizeof(float);
    static constexpr size_t kSmemBytes = kReadOffset + kRawSlots * sizeof(uint64_t);
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
};

/* A_TRANS, B_TRANS: ladder.h's transpose flags. `items`: the output tiles of all the slices or products. */
template <bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kDirectThreads, 1)
    wgmma_tf32x3_regs_direct_kernel(fsg_gemm problem, fsg_batch batch, int64_t items) {
    constexpr int BN = kDirectBN;
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    char *base = reinterpret_cast<char *>(smem);
    float *raw = reinterpret_cast<float *>(base + DirectLayout::kRawOffset);
    uint64_t *a_read = reinterpret_cast<uint64_t *>(base + DirectLayout::kReadOffset);
    if (threadIdx.x == 0)  // before start_ring's fence and __syncthreads
        for (int slot = 0; slot < kRawSlots; ++slot) mbarrier_init(&a_read[slot], kConsumerThreads);
    const auto [stages, full, empty] = start_ring<kDirectStages, kDirectStageFloats, kDirectProducers>(smem);
    const int tiles_m = (int)ceil_div(problem.m, kBM), tiles_n = (int)ceil_div(problem.n, BN);
    const int tid = threadIdx.x;

    if (tid < kDirectProducers) {
        registers_down<kDirectProducerRegisters>();
        int64_t total = 0;  // the k-tiles of all this block's items, one after another through both rings
        for (int64_t i = blockIdx.x; i < items; i += gridDim.x)
            total += ceil_div(slice_or_product(problem, batch, work_item(i, tiles_m, tiles_n).z).k, kBK);
        using TileA = Vec4Tile<kBM, kBK, kDirectProducers, A_TRANS>;
        using TileB = Vec4Tile<kBK, BN, kDirectProducers, B_TRANS>;
        struct Cursor {  // the item and k-tile the copies fetch next
            int64_t item;
            const float *a, *b;
            int64_t k, row0, col0;
            int t, count;
            bool interior;  // the whole tile inside both matrices, both 16-byte aligned
            const float *a_chunk[TileA::kPerThread], *b_chunk[TileB::kPerThread];  // this thread's chunks at k = 0
        } next;
        auto chunk_at = [](const float *p, int64_t ld, bool trans, int64_t row0, int64_t col0, int r, int c) {
            return p + (trans ? (col0 + c) * ld + row0 + r : (row0 + r) * ld + col0 + c);
        };
        auto start_item = [&](int64_t item) {
            next.item = item;
            next.t = 0;
            if (item >= items) return;
            const WorkItem w = work_item(item, tiles_m, tiles_n);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            next.a = g.a, next.b = g.b, next.k = g.k;
            next.row0 = (int64_t)w.tile_m * kBM, next.col0 = (int64_t)w.tile_n * BN;
            next.count = (int)ceil_div(g.k, kBK);
            next.interior = next.row0 + kBM <= problem.m && next.col0 + BN <= problem.n &&
                            aligned16(g.a, problem.lda) && aligned16(g.b, problem.ldb);
#pragma unroll
            for (int i = 0; i < TileA::kPerThread; ++i) {
                int r, c;
                TileA::chunk(tid, i, r, c);
                next.a_chunk[i] = chunk_at(g.a, problem.lda, A_TRANS, next.row0, 0, r, c);
            }
#pragma unroll
            for (int i = 0; i < TileB::kPerThread; ++i) {
                int r, c;
                TileB::chunk(tid, i, r, c);
                next.b_chunk[i] = chunk_at(g.b, problem.ldb, B_TRANS, 0, next.col0, r, c);
            }
        };
        start_item(blockIdx.x);
        auto fetch_next = [&](int64_t q) {  // tile q of the sequence into raw slot q % kRawSlots
            const int slot = (int)(q % kRawSlots);
            if (q >= kRawSlots) mbarrier_wait(&a_read[slot], (int)(q / kRawSlots - 1) & 1);  // its last A is read
            float *raw_a = raw + slot * kRawFloats, *raw_b = raw_a + kBM * kBK;
            const int64_t k0 = (int64_t)next.t * kBK;
            auto to_a = [&](int r, int c) { return raw_a + raw_a_offset<A_TRANS>(r, c); };
            auto to_b = [&](int r, int c) { return B_TRANS ? raw_b + c * kBK + r : raw_b + r * BN + c; };
            const int64_t lda = problem.lda, ldb = problem.ldb;
            if (next.interior && k0 + kBK <= next.k) {
                // Inside both matrices: one 16-byte copy per chunk, from addresses start_item worked out.
                const int64_t a_k = A_TRANS ? k0 * lda : k0, b_k = B_TRANS ? k0 : k0 * ldb;
#pragma unroll
                for (int i = 0; i < TileA::kPerThread; ++i) {
                    int r, c;
                    TileA::chunk(tid, i, r, c);
                    cp_async16(to_a(r, c), next.a_chunk[i] + a_k, 16);
                }
#pragma unroll
                for (int i = 0; i < TileB::kPerThread; ++i) {
                    int r, c;
                    TileB::chunk(tid, i, r, c);
                    cp_async16(to_b(r, c), next.b_chunk[i] + b_k, 16);
                }
            } else {  // at an edge, or unaligned: rung 12's copies, which check every chunk and zero-fill
                constexpr int kP = kDirectProducers;
                const int64_t m = problem.m, n = problem.n, k = next.k, row0 = next.row0, col0 = next.col0;
                if (aligned16(next.a, lda))
                    copy_tile_async<kBM, kBK, kP, A_TRANS, true, int64_t>(next.a, lda, m, k, row0, k0, tid, to_a);
                else
                    copy_tile_async<kBM, kBK, kP, A_TRANS, false, int64_t>(next.a, lda, m, k, row0, k0, tid, to_a);
                if (aligned16(next.b, ldb))
                    copy_tile_async<kBK, BN, kP, B_TRANS, true, int64_t>(next.b, ldb, k, n, k0, col0, tid, to_b);
                else
                    copy_tile_async<kBK, BN, kP, B_TRANS, false, int64_t>(next.b, ldb, k, n, k0, col0, tid, to_b);
            }
            if (++next.t == next.count) start_item(next.item + gridDim.x);
        };
#pragma unroll
        for (int q = 0; q < kCopiesAhead; ++q) {
            if (q < total) fetch_next(q);
            cp_async_commit();
        }
        for (int64_t t = 0; t < total; ++t) {
            if (t + kCopiesAhead < total) fetch_next(t + kCopiesAhead);
            cp_async_commit();
            cp_async_wait<kCopiesAhead>();  // this thread's copies of tile t have landed...
            producer_sync();                // ...and everyone's (A's included: the consumers read it after `full`)
            const int s = (int)(t % kDirectStages);
            if (t >= kDirectStages) mbarrier_wait(&empty[s], (int)(t / kDirectStages - 1) & 1);  // its last tile is read
            const float *raw_b = raw + (int)(t % kRawSlots) * kRawFloats + kBM * kBK;
            float *stage = stages + s * kDirectStageFloats;
            split_tile<BN, B_TRANS>(raw_b, stage, stage + kDirectBPart, tid);
            fence_proxy_async();  // these stores, before the consumers' wgmmas read them
            mbarrier_arrive(&full[s]);
        }
    } else {
        registers_up<kDirectConsumerRegisters>();
        const int consumer = tid / 128 - kDirectProducers / 128, warp = (tid % 128) / 32, lane = tid % 32;
        const int row = consumer * kWgRows + warp * 16 + lane / 4, col = lane % 4;  // as in the kernel above
        int64_t at = 0;  // the tile's place in the rings' sequence
        for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
            const WorkItem w = work_item(item, tiles_m, tiles_n);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            const int count = (int)ceil_div(g.k, kBK);
            float corr[BN / 2] = {}, main[BN / 2] = {}, part[BN / 2];  // as in the kernel above
            for (int t = 0; t < count; ++t, ++at) {
                const int s = (int)(at % kDirectStages), slot = (int)(at % kRawSlots);
                mbarrier_wait(&full[s], (int)(at / kDirectStages) & 1);
                uint32_t a_hi[kKSteps][4], a_lo[kKSteps][4];
                split_fragments<A_TRANS>(raw + slot * kRawFloats, row, col, 0, a_hi, a_lo);
                mbarrier_arrive(&a_read[slot]);  // A is in registers: the producers may refill its slot
                const float *b_hi = stages + s * kDirectStageFloats, *b_lo = b_hi + kDirectBPart;
                three_products(part, corr, a_hi, a_lo, b_hi, b_lo, 0);
                mbarrier_arrive(&empty[s]);
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) main[i] += part[i];
            }
            store_slice<BN>(g, (int64_t)w.tile_m * kBM + consumer * kWgRows, (int64_t)w.tile_n * BN,
                            [&](int i) { return combine(main[i], corr[i]); });
        }
    }
}

/* The direct path's launcher: a block per SM (or per work item, where there are fewer), each taking the output
 * tiles of every split-K slice or product gridDim.x apart. *launched stays false (the mma.sync path then runs)
 * for k == 0, more tiles than an int holds, or a batch past kFsgMaxBatch. */
inline cudaError_t launch_direct(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    const int64_t tiles = ceil_div(g->m, kBM) * ceil_div(g->n, kDirectBN);
    *launched = g->k > 0 && tiles <= INT32_MAX && batch.count <= kFsgMaxBatch;
    if (!*launched) return cudaSuccess;
    int sms;
    cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    const int64_t items = tiles * grid_z(*g, batch);
    const dim3 grid((unsigned)(items < sms ? items : sms));
    const size_t smem = DirectLayout::kSmemBytes;
    auto run = [&](auto kernel) { launch_with_smem(kernel, grid, kDirectThreads, smem, stream, *g, batch, items); };
    if (g->a_trans) {
        if (g->b_trans) run(wgmma_tf32x3_regs_direct_kernel<true, true>);
        else run(wgmma_tf32x3_regs_direct_kernel<true, false>);
    } else {
        if (g->b_trans) run(wgmma_tf32x3_regs_direct_kernel<false, true>);
        else run(wgmma_tf32x3_regs_direct_kernel<false, false>);
    }
    return cudaGetLastError();
}

}  // namespace tf32x3_regs
}  // namespace hopper
}  // namespace fsg

// ---- launchers ----
/* No pack pass: the producers split B, the consumers A (128 x 64 tiles, persistent grid). */
extern "C" cudaError_t fsg_tf32x3_regs_direct_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_regs_direct_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

extern "C" cudaError_t fsg_tf32x3_regs_direct_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch,
                                                          cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3_regs::launch_direct,
                                            fsg_tf32x3_mma_sgemm);
}
