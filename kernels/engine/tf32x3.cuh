/*
 * engine/tf32x3.cuh: the production three-product split on wgmma, behind kernel="tf32x3" and its engine
 * configurations (128x64, direct), and what tf32x3_regs falls back to. The idea is rung 20's lesson
 * (kernels/ladder/20_tf32x3.cu): the pack pass splits each operand into TF32 hi and lo tiles, the consumers run
 * hi*hi into a temporary added to the running sum with FADDs (round to nearest) and accumulate lo*hi + hi*lo in
 * the tensor core, then combine() them.
 *
 * consume_stages is the consumers' side of a stage ring for any producer: the packed kernel here, and the
 * persistent direct path's (engine/tf32x3_direct.cu), which passes its own producer count and ring position.
 * BlockShape<64> is the 128 x 64 tile of tf32x3:128x64 (engine/tf32x3_128x64.cu), two blocks sharing a packed
 * tile of B.
 *
 * Tile parameters: 128 x 128 x 32 (or 128 x 64), three 64 KiB stages, one block an SM. Built for sm_90a only.
 * The launchers are in engine/tf32x3.cu.
 */
#ifndef FASTSGEMM_ENGINE_TF32X3_CUH
#define FASTSGEMM_ENGINE_TF32X3_CUH

#include "engine/tf32.cuh"

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
                    [&](int i) { return combine(main[i], corr[i]); });
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
}  // namespace hopper
}  // namespace fsg


#endif  // FASTSGEMM_ENGINE_TF32X3_CUH
