/*
 * engine/tf32.cuh: the production wgmma kernel on operands rounded to TF32, behind kernel="tf32" (and the
 * packed path kernel="tf32_tma" falls back to). Its idea is rung 19's lesson (kernels/ladder/19_tf32.cu): a pack
 * pass rounds both operands into ready K-major tiles (engine/pack.cuh), then one producer thread brings whole
 * tiles by bulk copies into a 4-stage mbarrier ring and two consumer warpgroups run wgmma on them.
 *
 * What the engine adds around the kernel: K panels where the workspace is short, a batch's products on grid z
 * with every product packed in one pass, split-K's slices, and rung 17's mma.sync where wgmma is not had
 * (engine/pack.cuh's launch_on_packed and wgmma_else_mma_sync).
 *
 * Tile parameters: 128 x 256 x 32 block tile (one packed tile of A, two of B), 4 x 48 KiB stages, one block an
 * SM. Built for sm_90a only (setup.py's FILE_ARCHS). The launchers are in engine/tf32.cu.
 */
#ifndef FASTSGEMM_ENGINE_TF32_CUH
#define FASTSGEMM_ENGINE_TF32_CUH

#include "engine/pack.cuh"

namespace fsg {
namespace hopper {
namespace tf32 {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 256;  // block tile: one packed A tile, two packed B tiles
constexpr int kBTiles = kBN / kPackRows;
static_assert(kBM == kPackRows && kBN % kPackRows == 0, "block tiles are whole packed tiles");
constexpr int kStageFloats = (1 + kBTiles) * kTileFloats;  // A, then B's tiles: 48 KiB
constexpr int kStages = 4;
constexpr size_t kSmemBytes = pipeline_smem_bytes(kStages, kStageFloats);

// ---- kernel ----
/* D = alpha A B + beta C from the packed operands: A's row tile tile_m holds
 * tiles_k tiles, one per k-step, and so does each of B's; the block's split-K
 * slice takes its own run of them (slice_tiles) and its own D, and a batch's
 * product its own packed operands, step_a and step_b floats on per product
 * (engine/pack.cuh), and its own A, B and D. A template (of
 * a parameter that changes nothing) so that the engine files that include this
 * header get no second definition of it: a template is emitted only where used. */
template <int = 0>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32_kernel(fsg_gemm problem, fsg_batch batch, const float *packed_a, const float *packed_b, int tiles_k,
                      int64_t step_a, int64_t step_b) {
    const fsg_gemm g = this_slice_or_product(problem, batch);  // this block's K-slice, or product (engine/pipeline.cuh)
    packed_a += blockIdx.z * step_a;  // steps are 0 but in a batch
    packed_b += blockIdx.z * step_b;
    const SliceTiles slice = slice_tiles(problem, tiles_k);
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    // stages: [kStages][A, B 0, B 1][kTileFloats]
    const auto [stages, full, empty, tile_m, tile_n] = start_block<kStages, kStageFloats, kBM, kBN>(smem, g);
    const int tid = threadIdx.x, warpgroup = tid / 128;
    if (warpgroup == 0) {
        // Producer: one thread, three bulk copies per stage; the rest of the warpgroup only gives its registers up.
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            const float *a = packed_a + ((int64_t)tile_m * tiles_k + slice.first) * kTileFloats;
            const float *b = packed_b + ((int64_t)tile_n * kBTiles * tiles_k + slice.first) * kTileFloats;
            auto copy = [&](int t, float *stage, uint64_t *bar) {
                bulk_load(stage, a + (int64_t)t * kTileFloats, kTileBytes, bar);
#pragma unroll
                for (int j = 0; j < kBTiles; ++j)
                    bulk_load(stage + (1 + j) * kTileFloats, b + ((int64_t)j * tiles_k + t) * kTileFloats, kTileBytes,
                              bar);
            };
            produce_stages<kStages, kStageFloats>(stages, full, empty, slice.count, copy);
        }
    } else {
        // Consumers: 64 rows of the block tile each, nothing but wgmma.
        registers_up<kConsumerRegisters>();
        const int consumer = warpgroup - 1;
        float acc[kBTiles][64] = {};
        for (int t = 0; t < slice.count; ++t) {
            const int s = t % kStages;
            mbarrier_wait(&full[s], (t / kStages) & 1);
            const float *a = stages + s * kStageFloats + consumer * kWgRows * kBK;
            const float *b = stages + s * kStageFloats + kTileFloats;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kBK / 8; ++ks) {  // k-steps of 8: 32 bytes along each 128-byte row
                const uint64_t da = descriptor(a + 8 * ks);
#pragma unroll
                for (int j = 0; j < kBTiles; ++j) wgmma_64x128x8(acc[j], da, descriptor(b + j * kTileFloats + 8 * ks), 1);
            }
            wgmma_commit();
            wgmma_wait<1>();  // tile t - 1's group has finished: its stage may be refilled
            if (t > 0) mbarrier_arrive(&empty[(t - 1) % kStages]);
        }
        wgmma_wait_all();
#pragma unroll
        for (int j = 0; j < kBTiles; ++j) touch(acc[j]);

        const int64_t row0 = (int64_t)tile_m * kBM + consumer * kWgRows;
#pragma unroll
        for (int j = 0; j < kBTiles; ++j)
            store_slice(g, row0, (int64_t)tile_n * kBN + j * kPackRows, [&](int i) { return acc[j][i]; });
    }
}

inline cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    return launch_on_packed<1, kBM, kBN>(wgmma_tf32_kernel<>, kSmemBytes, *g, batch, stream, launched);
}

}  // namespace tf32
}  // namespace hopper
}  // namespace fsg


#endif  // FASTSGEMM_ENGINE_TF32_CUH
