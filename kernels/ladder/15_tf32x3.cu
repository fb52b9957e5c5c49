/*
 * Rung 15, tf32x3: FP32 accuracy on Hopper's wgmma: rung 13's split into
 * three TF32 products, on rung 14's pipeline.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): the launcher runs it on
 * devices of compute capability 9.0 and runs rung 13 (tf32x3_mma) on Ampere
 * and Ada, and for the rare call whose workspace cannot be allocated.
 *
 * mma.sync is a warp's instruction and feeds the tensor cores from registers
 * that every lane loads from shared memory first. Hopper's wgmma is issued by
 * a warpgroup (4 warps, 128 threads), reads its operands straight from shared
 * memory through descriptors and runs asynchronously: a 64 x 128 x 8 product
 * per instruction while the threads do something else. On the H100 the
 * mma.sync kernels reach about 140 TFLOP/s of TF32; cuBLAS's wgmma kernels 400.
 *
 * wgmma takes TF32 operands only K-major, and each operand has to be split
 * into hi and lo before the tensor cores see it. Two passes:
 *   1. pack (kernels/engine/pack.cuh, one small kernel for both operands) reads A and B
 *      once, each in whatever layout it has, splits every element (hi = x rounded
 *      to TF32 by Hopper's one-instruction cvt.rn, lo = x - hi rounded the
 *      same way) and writes hi and lo tiles to a workspace, ready in operand
 *      layout (K-major, 128-byte swizzle), zeros past the edges;
 *   2. the GEMM, whose producer thread brings each stage (A hi and lo, B hi
 *      and lo: 64 KiB) with two bulk copies.
 * The first Hopper version split the tiles inside the GEMM: a producer
 * warpgroup copied each tile to a staging buffer by TMA, and read, split and
 * wrote it back. That conversion, not the tensor cores, set its pace (88
 * TFLOP/s at 8192^3, 1.70x cuBLAS FP32; benchmarks/NOTES.md). The pack pass
 * moves (MK + KN) x 12 bytes through DRAM once instead.
 *
 * Warp specialization. The block has three warpgroups. The producer keeps 40
 * registers and hands the rest to the two consumers (setmaxnreg), which do
 * nothing but wgmma on a 64 x 128 slice each and the FADDs of the main term,
 * with 192 accumulators a thread. They meet at mbarriers: `full` (a stage's
 * bytes have landed) and `empty` (its wgmmas have finished reading it).
 *
 * The sums follow rung 13: the main term hi_a hi_b of each BK-deep tile
 * comes out of the tensor core into a temporary and is added to the running
 * sum with FP32 FADDs (round to nearest); the corrections accumulate inside.
 * While one consumer adds its main term the other's wgmmas keep the tensor
 * cores busy.
 *
 * Tile parameters: 128 x 128 x 32 block tile, three 64 KiB stages, one block per SM; blocks
 * walk the output in groups of kGroupRows block rows (engine/pipeline.cuh's
 * start_block) so that the blocks resident together share tiles in L2. The
 * configuration tf32x3:128x64 halves the block's columns (two blocks share
 * each packed tile of B): 128 blocks at 1024^3 instead of 64, for the 132 SMs
 * (1.63x torch.matmul there, against 1.16x; benchmarks/NOTES.md).
 * Limits: sm_90a only (elsewhere rung 13 runs); a workspace of 2 (m + n) k
 * floats (rounded up to whole tiles) for the duration of the call.
 * Stacks: `tf32x3` and `:128x64` as rung 14 (every product packed in one
 * pass, the product on grid z; rung 13 where this path declines); `:direct`
 * takes every product's output tiles on its persistent grid, one launch with
 * no pack pass.
 * Next: a 128 x 256 tile needs fewer accumulator sets than three (the main
 * term's temporary could live in shared memory).
 */
#ifndef FASTSGEMM_LADDER_15_TF32X3
#define FASTSGEMM_LADDER_15_TF32X3

#include "ladder/14_tf32.cu"  // and through it rung 13's split and its sum (combine), rung 9's cp.async

namespace fsg {
namespace hopper {
namespace tf32x3 {

// ---- tile parameters ----
constexpr int kBM = 128;  // block tile rows: one packed tile of A, hi and lo
static_assert(kBM == kPackRows, "block tiles are packed tiles");
constexpr int kStages = 3;

/* A block's share of B: a packed tile (kPackRows = 128 columns of D), or, for
 * a BN = 64 block tile, one half of one, which two neighbouring blocks share.
 * Rows 64-127 of a packed tile start on a swizzle atom (8 rows of 128 bytes),
 * so a half lands in shared memory in the layout the descriptor expects. */
template <int BN>
struct BlockShape {
    static_assert(BN == kPackRows || BN == kPackRows / 2, "a whole packed tile of B, or half of one");
    static constexpr int kBPartFloats = BN * kBK;                       // one part (hi or lo) of the block's B
    static constexpr int kStageFloats = 2 * kTileFloats + 2 * kBPartFloats;  // A hi, A lo, B hi, B lo
    static constexpr int kBlocksPerPackedB = kPackRows / BN;
    static constexpr size_t kSmemBytes = pipeline_smem_bytes(kStages, kStageFloats);
};

// ---- kernel ----
/* The consumers' side of a stage ring (both producers below fill it): a
 * 64 x BN slice of the block tile per consumer warpgroup, nothing but wgmma
 * and the main term's FADDs, then the epilogue. A stage holds A hi, A lo (128
 * rows), B hi, B lo (BN rows), K-major in the 128-byte swizzle. `first`: where
 * this tile's k-tiles start in the ring's sequence (a persistent block's
 * earlier items took the ones before). */
template <int BN, int STAGES, int PRODUCER_WARPGROUPS = 1>
__device__ __forceinline__ void consume_stages(const fsg_gemm &g, const float *stages, uint64_t *full,
                                               uint64_t *empty, int count, int tile_m, int tile_n,
                                               int64_t first = 0) {
    using Shape = BlockShape<BN>;
    constexpr int kStageFloats = Shape::kStageFloats, kBPart = Shape::kBPartFloats;
    const int consumer = threadIdx.x / 128 - PRODUCER_WARPGROUPS;
    float corr[BN / 2] = {};  // the corrections, summed by the tensor core
    float main[BN / 2] = {};  // the main term's running sum (FADD)
    float part[BN / 2];       // this tile's main term, out of the tensor core
    for (int t = 0; t < count; ++t) {
        const int64_t at = first + t;  // the tile's place in the ring's sequence
        const int s = (int)(at % STAGES);
        mbarrier_wait(&full[s], (int)(at / STAGES) & 1);
        const float *stage = stages + s * kStageFloats;
        const float *a_hi = stage + consumer * kWgRows * kBK, *a_lo = a_hi + kTileFloats;
        const float *b_hi = stage + 2 * kTileFloats, *b_lo = b_hi + kBPart;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) {  // k-steps of 8: 32 bytes along each 128-byte row
            const uint64_t da = descriptor(a_hi + 8 * ks), db = descriptor(b_hi + 8 * ks);
            wgmma_64xNx8(part, da, db, ks > 0);
            wgmma_64xNx8(corr, descriptor(a_lo + 8 * ks), db, 1);
            wgmma_64xNx8(corr, da, descriptor(b_lo + 8 * ks), 1);
        }
        wgmma_commit();
        wgmma_wait_all();
        touch(corr);
        touch(part);
        mbarrier_arrive(&empty[s]);  // this stage's reads are done: the producer may refill it
        // The other consumer's wgmmas keep the tensor cores busy while these FADDs run.
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) main[i] += part[i];
    }

    store_slice<BN>(g, (int64_t)tile_m * kBM + consumer * kWgRows, (int64_t)tile_n * BN,
                    [&](int i) { return tensorcore::combine(main[i], corr[i]); });
}

/* D = alpha A B + beta C from the packed operands: A's row tile tile_m holds
 * tiles_k tiles (hi, then lo), one per k-step, and so does B's; the block's
 * split-K slice takes its own run of them (slice_tiles) and its own D, and a
 * batch's product its own packed operands (step_a and step_b floats on per
 * product) and its own A, B and D. */
template <int BN>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_kernel(fsg_gemm problem, fsg_batch batch, const float *packed_a, const float *packed_b, int tiles_k,
                        int64_t step_a, int64_t step_b) {
    using Shape = BlockShape<BN>;
    constexpr int kStageFloats = Shape::kStageFloats, kBPart = Shape::kBPartFloats;
    const fsg_gemm g = this_slice_or_product(problem, batch);  // this block's K-slice, or product (engine/pipeline.cuh)
    packed_a += blockIdx.z * step_a;  // steps are 0 but in a batch
    packed_b += blockIdx.z * step_b;
    const SliceTiles slice = slice_tiles(problem, tiles_k);
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    // stages: [kStages][A hi, A lo, B hi, B lo]
    const auto [stages, full, empty, tile_m, tile_n] = start_block<kStages, kStageFloats, kBM, BN>(smem, g);
    const int tid = threadIdx.x, warpgroup = tid / 128;

    if (warpgroup == 0) {
        // Producer: one thread, two or three bulk copies per stage; the rest of the warpgroup gives its registers up.
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            const float *a = packed_a + ((int64_t)tile_m * tiles_k + slice.first) * 2 * kTileFloats;
            const int64_t packed_n = tile_n / Shape::kBlocksPerPackedB, part = tile_n % Shape::kBlocksPerPackedB;
            const float *b = packed_b + (packed_n * tiles_k + slice.first) * 2 * kTileFloats + part * kBPart;
            auto copy = [&](int t, float *stage, uint64_t *bar) {
                const float *a_tile = a + (int64_t)t * 2 * kTileFloats, *b_tile = b + (int64_t)t * 2 * kTileFloats;
                bulk_load(stage, a_tile, 2 * kTileBytes, bar);
                if constexpr (BN == kPackRows) {  // hi and lo of the whole tile: one run
                    bulk_load(stage + 2 * kTileFloats, b_tile, 2 * kTileBytes, bar);
                } else {  // this block's rows of hi, then of lo
                    bulk_load(stage + 2 * kTileFloats, b_tile, kBPart * sizeof(float), bar);
                    bulk_load(stage + 2 * kTileFloats + kBPart, b_tile + kTileFloats, kBPart * sizeof(float), bar);
                }
            };
            produce_stages<kStages, kStageFloats>(stages, full, empty, slice.count, copy);
        }
    } else {
        registers_up<kConsumerRegisters>();
        consume_stages<BN, kStages>(g, stages, full, empty, slice.count, tile_m, tile_n);
    }
}

template <int BN>
cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    return launch_on_packed<2, kBM, BN>(wgmma_tf32x3_kernel<BN>, BlockShape<BN>::kSmemBytes, *g, batch, stream,
                                        launched);
}

/* ---- The direct path (tf32x3:direct): no pack pass ----
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
 * The conversion: a producer thread owns 16-byte chunks of the operand tile,
 * four consecutive k of one row (m of A, n of B), one STS.128 each for hi and
 * lo. The raw tile lies as the matrix does. Where k is its contiguous
 * direction a chunk is one LDS.128, and a quarter warp (8 lanes) takes the 8
 * chunks of one row: all 32 banks on both sides. Where rows are contiguous a
 * warp's lanes take one chunk of 32 consecutive rows (four LDS.32, each a
 * whole 128-byte line); a quarter warp then stores 8 consecutive rows of one
 * chunk column, whose swizzled positions differ.
 *
 * The grid is persistent: one block per SM, each taking the work items
 * (output tiles of every product or split-K slice) gridDim.x apart, and the
 * producers' copies run on from one item into the next while the consumers
 * store the last one. A block per tile started each tile's pipeline empty and
 * ended it with an epilogue that loaded nothing.
 *
 * The producers' instructions set the pace: two warps per SM sub-partition
 * cannot hide their latencies, so the kernel ran at about 45 TFLOP/s whatever
 * the shape, with a deeper raw ring changing nothing. Rung 9's copies work out
 * and bounds-check every chunk's address on every tile (about 330 instructions
 * a tile for each producer thread); a tile wholly inside both matrices instead
 * takes one 16-byte copy per chunk from addresses start_item works out once
 * per item, about 60 instructions. With that, 62-70 TFLOP/s
 * (benchmarks/NOTES.md, "The direct path, persistent").
 *
 * A first version loaded each tile into registers, one tile ahead: correct,
 * but the producer waited out a load's latency every tile and ran the whole
 * kernel at 31-33 TFLOP/s whatever the shape (benchmarks/NOTES.md). */
constexpr int kDirectStages = 3, kRawStages = 3;
// Two producer warpgroups: the copies' address arithmetic and the split are a few hundred instructions a tile
// for each producer thread, and one warp per SM sub-partition could not issue them fast enough.
constexpr int kDirectProducers = 256, kDirectThreads = kDirectProducers + kConsumerThreads;
constexpr int kDirectProducerRegisters = 88, kDirectConsumerRegisters = 168;  // no spills either side
static_assert(kDirectProducers * kDirectProducerRegisters + kConsumerThreads * kDirectConsumerRegisters <=
                  kDirectThreads * 128,
              "the block starts with 128 registers a thread (__launch_bounds__(512, 1))");

/* Shared memory: the operand stages and their barriers (start_ring), then the raw ring. */
template <int BN>
struct DirectLayout {
    static constexpr int kRawFloats = (kBM + BN) * kBK;  // raw A, then raw B
    static constexpr size_t kStagesBytes = pipeline_smem_bytes(kDirectStages, BlockShape<BN>::kStageFloats);
    static constexpr size_t kRawOffset = (kStagesBytes + 127) / 128 * 128;
    static constexpr size_t kSmemBytes = kRawOffset + (size_t)kRawStages * kRawFloats * sizeof(float);
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
};

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
            } else {  // at an edge, or unaligned: rung 9's copies, which check every chunk and zero-fill
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

// ---- launchers (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
/* 128 x 128 block tiles: the rung's own configuration. */
extern "C" cudaError_t fsg_tf32x3_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

/* A batch, in each configuration: the products on grid z, every product's operands packed in one pass (none
 * for the direct path). */
extern "C" cudaError_t fsg_tf32x3_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3::launch<128>, fsg_tf32x3_mma_sgemm);
}

/* 128 x 64 block tiles: twice the blocks, for problems near 1024^3 whose
 * 128 x 128 tiles leave half the H100's SMs idle. */
extern "C" cudaError_t fsg_tf32x3_128x64_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_128x64_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

extern "C" cudaError_t fsg_tf32x3_128x64_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3::launch<64>, fsg_tf32x3_mma_sgemm);
}

/* No pack pass, 128 x 64 block tiles: for a small result and a long K, where
 * packing the operands costs more than the product. */
extern "C" cudaError_t fsg_tf32x3_direct_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_direct_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

extern "C" cudaError_t fsg_tf32x3_direct_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3::launch_direct<64>,
                                            fsg_tf32x3_mma_sgemm);
}

#endif

#endif /* FASTSGEMM_LADDER_15_TF32X3 */
