/*
 * Rung 20, tf32x3: FP32 accuracy on Hopper's wgmma: rung 18's split into
 * three TF32 products, on rung 19's pipeline.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): the launcher runs it on
 * devices of compute capability 9.0 and runs rung 18 (tf32x3_mma) on Ampere
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
 * The sums follow rung 18: the main term hi_a hi_b of each BK-deep tile
 * comes out of the tensor core into a temporary and is added to the running
 * sum with FP32 FADDs (round to nearest); the corrections accumulate inside.
 * While one consumer adds its main term the other's wgmmas keep the tensor
 * cores busy.
 *
 * Tile parameters: 128 x 128 x 32 block tile, three 64 KiB stages, one block per SM; blocks
 * walk the output in groups of kGroupRows block rows (engine/pipeline.cuh's
 * start_block) so that the blocks resident together share tiles in L2. The
 * engine's configuration tf32x3:128x64 (kernels/engine/tf32x3_128x64.cu)
 * halves the block's columns (two blocks share each packed tile of B): 128
 * blocks at 1024^3 instead of 64, for the 132 SMs.
 * Limits: sm_90a only (elsewhere rung 18 runs); a workspace of 2 (m + n) k
 * floats (rounded up to whole tiles) for the duration of the call.
 * Stacks: as rung 19 (every product packed in one pass, the product on grid
 * z; rung 18 where this path declines). The
 * engine's `:direct` (kernels/engine/tf32x3_direct.cu) has no pack pass: its
 * producers split raw tiles themselves, every product's output tiles on one
 * persistent grid.
 * Next: a 128 x 256 tile needs fewer accumulator sets than three (the main
 * term's temporary could live in shared memory).
 */
#ifndef FASTSGEMM_LADDER_20_TF32X3
#define FASTSGEMM_LADDER_20_TF32X3

#include "ladder/19_tf32.cu"  // and through it rung 18's split and its sum (combine), rung 12's cp.async

namespace fsg {
namespace lesson {
using namespace ::fsg::hopper;  // the Hopper machinery (engine/pack.cuh), until the Hopper lessons carry their own

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

}  // namespace tf32x3
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
/* Registered as kernel="tf32x3:lesson": one product at a time (a stack runs product by product). kernel="tf32x3"
 * runs the engine's copy of this code (kernels/engine/tf32x3.cuh), with stacks in one launch. */
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_tf32x3_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, &fsg::hopper::kOneProduct, stream, fsg::lesson::tf32x3::launch<128>,
                                            fsg_tf32x3_mma_sgemm);
}
#endif

#endif /* FASTSGEMM_LADDER_20_TF32X3 */
