/*
 * engine/tf32x3_direct.cu: configuration "direct" of rung 20
 * (kernel="tf32x3:direct"): rung 20's consumers with no pack pass.
 *
 * The pack pass moves (MK + KN) x 12 bytes through DRAM before the GEMM and
 * the GEMM reads 8 of them back. Where the result is small and K long
 * (256 x 256 x 16384: 48 MB packed, 36 us, for a product cuBLAS does in 58 us)
 * that traffic is the call. Here the producer warpgroup brings each k-tile of
 * A and B from the caller's matrices itself: cp.async copies (16 bytes where
 * the matrix allows) into a raw staging ring, kRawStages tiles in flight,
 * then a pass that reads the raw tile, splits it and writes hi and lo into
 * the stage in the operand layout. DRAM sees (MK + KN) x 4 bytes and nothing
 * written. The consumers are the packed path's, and so are the numbers, bit
 * for bit: the same split (split_rn), tiles and order of sums as
 * tf32x3:128x64.
 *
 * The grid is persistent: one block per SM, each taking the work items
 * (output tiles of every product or split-K slice) gridDim.x apart, and the
 * producers' copies run on from one item into the next while the consumers
 * store the last one. A block per tile started each tile's pipeline empty and
 * ended it with an epilogue that loaded nothing.
 *
 * The producers' instructions set the pace: two warps per SM sub-partition
 * cannot hide their latencies, so the kernel ran at about 45 TFLOP/s whatever
 * the shape, with a deeper raw ring changing nothing. Rung 12's copies work out
 * and bounds-check every chunk's address on every tile (about 330 instructions
 * a tile for each producer thread); a tile wholly inside both matrices instead
 * takes one 16-byte copy per chunk from addresses start_item works out once
 * per item, about 60 instructions. With that, 62-70 TFLOP/s
 * (benchmarks/NOTES.md, "The direct path, persistent").
 *
 * A first version loaded each tile into registers, one tile ahead: correct,
 * but the producer waited out a load's latency every tile and ran the whole
 * kernel at 31-33 TFLOP/s whatever the shape (benchmarks/NOTES.md). */

#include "engine/simt.cuh"     // cp.async and the bounds-checked tile copy
#include "engine/tf32x3.cuh"   // the consumers (consume_stages), the block shape
#include "engine/direct.cuh"    // the producers' split

namespace fsg {
namespace hopper {
namespace tf32x3 {

// The SIMT engine's copies (engine/simt.cuh): 16-byte cp.async where a tile is inside an aligned matrix.
using engine::aligned16;
using engine::copy_tile_async;
using engine::cp_async16;
using engine::cp_async_commit;
using engine::cp_async_wait;
using engine::Vec4Tile;

using direct::kDirectConsumerRegisters;
using direct::kDirectProducerRegisters;
using direct::kDirectProducers;
using direct::kDirectThreads;
using direct::producer_sync;
using direct::split_tile;
constexpr int kDirectStages = 3, kRawStages = 3;

/* Shared memory: the operand stages and their barriers (start_ring), then the raw ring. */
template <int BN>
struct DirectLayout {
    static constexpr int kRawFloats = (kBM + BN) * kBK;  // raw A, then raw B
    static constexpr size_t kStagesBytes = pipeline_smem_bytes(kDirectStages, BlockShape<BN>::kStageFloats);
    static constexpr size_t kRawOffset = (kStagesBytes + 127) / 128 * 128;
    static constexpr size_t kSmemBytes = kRawOffset + (size_t)kRawStages * kRawFloats * sizeof(float);
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
};

/* A_TRANS, B_TRANS: ladder.h's transpose flags (a column-major A has m, not
 * k, contiguous; a column-major B has k contiguous). `items`: the output tiles
 * of all the slices or products (work_item numbers them). */
template <int BN, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kDirectThreads, 1)
    wgmma_tf32x3_direct_kernel(fsg_gemm problem, fsg_batch batch, int64_t items) {
    using Shape = BlockShape<BN>;
    using Layout = DirectLayout<BN>;
    constexpr int kStageFloats = Shape::kStageFloats, kBPart = Shape::kBPartFloats;
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    const auto [stages, full, empty] = start_ring<kDirectStages, kStageFloats, kDirectProducers>(smem);
    const int tiles_m = (int)ceil_div(problem.m, kBM), tiles_n = (int)ceil_div(problem.n, BN);
    const int tid = threadIdx.x;
    auto depth_tiles = [&](int64_t z) { return (int)ceil_div(slice_or_product(problem, batch, z).k, kBK); };

    if (tid < kDirectProducers) {
        registers_down<kDirectProducerRegisters>();
        float *raw = reinterpret_cast<float *>(reinterpret_cast<char *>(smem) + Layout::kRawOffset);
        int64_t total = 0;  // the k-tiles of all this block's items, one after another through both rings
        for (int64_t i = blockIdx.x; i < items; i += gridDim.x) total += depth_tiles(work_item(i, tiles_m, tiles_n).z);
        // The copies run kRawStages - 1 tiles ahead of the split, from one item into the next: `next` is the item
        // and k-tile they fetch next.
        using TileA = Vec4Tile<kBM, kBK, kDirectProducers, A_TRANS>;
        using TileB = Vec4Tile<kBK, BN, kDirectProducers, B_TRANS>;
        struct Cursor {
            int64_t item;
            const float *a, *b;
            int64_t k, row0, col0;
            int t, count;
            bool interior;  // the whole tile inside both matrices, both 16-byte aligned
            const float *a_chunk[TileA::kPerThread], *b_chunk[TileB::kPerThread];  // this thread's chunks at k = 0
        } next;
        // Where a ROWS x COLS tile's chunk (r, c) at (row0, col0) starts in its matrix (copy_tile_async's address).
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
        auto fetch_next = [&](int64_t q) {  // into raw stage q % kRawStages
            float *raw_a = raw + (int)(q % kRawStages) * Layout::kRawFloats, *raw_b = raw_a + kBM * kBK;
            const int64_t k0 = (int64_t)next.t * kBK;
            auto to_a = [&](int r, int c) { return A_TRANS ? raw_a + c * kBM + r : raw_a + r * kBK + c; };
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
        for (int q = 0; q < kRawStages - 1; ++q) {
            if (q < total) fetch_next(q);
            cp_async_commit();
        }
        for (int64_t t = 0; t < total; ++t) {
            producer_sync();  // everyone has split tile t - 1: its raw stage may be refilled
            if (t + kRawStages - 1 < total) fetch_next(t + kRawStages - 1);
            cp_async_commit();
            cp_async_wait<kRawStages - 1>();  // this thread's copies of tile t have landed...
            producer_sync();                  // ...and everyone's
            const int s = (int)(t % kDirectStages);
            if (t >= kDirectStages) mbarrier_wait(&empty[s], (int)(t / kDirectStages - 1) & 1);  // its last tile is read
            const float *raw_a = raw + (int)(t % kRawStages) * Layout::kRawFloats, *raw_b = raw_a + kBM * kBK;
            float *stage = stages + s * kStageFloats;
            split_tile<kBM, !A_TRANS>(raw_a, stage, stage + kTileFloats, tid);
            split_tile<BN, B_TRANS>(raw_b, stage + 2 * kTileFloats, stage + 2 * kTileFloats + kBPart, tid);
            fence_proxy_async();  // these stores, before the consumers' wgmmas read them
            mbarrier_arrive(&full[s]);
        }
    } else {
        registers_up<kDirectConsumerRegisters>();
        int64_t first = 0;  // where this item's tiles start in the ring's sequence
        for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
            const WorkItem w = work_item(i, tiles_m, tiles_n);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            const int count = (int)ceil_div(g.k, kBK);
            consume_stages<BN, kDirectStages, kDirectProducers / 128>(g, stages, full, empty, count, w.tile_m,
                                                                       w.tile_n, first);
            first += count;
        }
    }
}

/* The direct path's launcher: a block per SM (or per work item, where there are fewer), each taking the output
 * tiles of every split-K slice or product gridDim.x apart. *launched stays false (the mma.sync path then runs)
 * for k == 0, more tiles than an int holds, or a batch past kFsgMaxBatch. */
template <int BN>
cudaError_t launch_direct(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    const int64_t tiles = ceil_div(g->m, kBM) * ceil_div(g->n, BN);
    *launched = g->k > 0 && tiles <= INT32_MAX && batch.count <= kFsgMaxBatch;
    if (!*launched) return cudaSuccess;
    int sms;
    cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    const int64_t items = tiles * grid_z(*g, batch);
    const dim3 grid((unsigned)(items < sms ? items : sms));
    const size_t smem = DirectLayout<BN>::kSmemBytes;
    auto run = [&](auto kernel) { launch_with_smem(kernel, grid, kDirectThreads, smem, stream, *g, batch, items); };
    if (g->a_trans) {
        if (g->b_trans) run(wgmma_tf32x3_direct_kernel<BN, true, true>);
        else run(wgmma_tf32x3_direct_kernel<BN, true, false>);
    } else {
        if (g->b_trans) run(wgmma_tf32x3_direct_kernel<BN, false, true>);
        else run(wgmma_tf32x3_direct_kernel<BN, false, false>);
    }
    return cudaGetLastError();
}

}  // namespace tf32x3
}  // namespace hopper
}  // namespace fsg

// ---- launchers ----
/* No pack pass, 128 x 64 block tiles: for a small result and a long K, where
 * packing the operands costs more than the product. */
extern "C" cudaError_t fsg_tf32x3_direct_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_direct_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

extern "C" cudaError_t fsg_tf32x3_direct_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3::launch_direct<64>,
                                            fsg_tf32x3_mma_sgemm);
}
