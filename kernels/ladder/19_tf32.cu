/*
 * Rung 19, tf32: Hopper's wgmma, fed by a packing pass and bulk copies, on
 * operands rounded to TF32.
 *
 * Built for sm_90a only (setup.py's FILE_ARCHS): the launcher runs it on
 * devices of compute capability 9.0 and runs rung 17 (tf32_mma) on Ampere and
 * Ada, and for the rare call whose workspace cannot be allocated.
 *
 * Rung 17's mma.sync kernel runs at about 0.4x cuBLAS's TF32 speed on the
 * H100: every lane loads its fragments from shared memory into registers
 * before each MMA, and those loads, not the tensor cores, set the pace.
 * wgmma reads both operands straight from shared memory and runs
 * asynchronously; what remains is to bring the tiles there, rounded.
 *
 * Rounding decides how. The tensor cores read an FP32 value as TF32 by
 * dropping its low 13 bits, which biases every operand toward zero: measured
 * on the H100, 7.8e-4 relative error on random data against 2.9e-4 for
 * operands rounded to nearest (rung 17's and cuBLAS's TF32 error). Rounding
 * inside the GEMM kernel was tried three ways (benchmarks/NOTES.md): rounding
 * in shared memory after TMA doubled the shared-memory traffic, and rounding
 * in registers between LDG and STS stalled on the proxy fence every thread
 * needs before wgmma may read its stores. Both stayed near mma.sync's speed,
 * while the same pipeline fed unrounded tiles by the copy engine ran at 0.7x
 * cuBLAS.
 *
 * So the rounding moves out of the GEMM: two passes.
 *   1. pack (kernels/engine/pack.cuh, one small kernel for both operands): reads A and B
 *      once, each in whatever layout it has, rounds every element to TF32 (cvt.rn,
 *      nearest even) and writes it to a workspace as a sequence of ready
 *      operand tiles: 128 rows (m or n) x 32 k, K-major in wgmma's 128-byte
 *      swizzle, zeros past the matrix's edges. Each tile is 16 KiB of
 *      contiguous memory. The pass moves (MK + KN) x 8 bytes through DRAM:
 *      12% of the call at 8192^3, 20% at 4096^3.
 *   2. the GEMM: one producer thread copies whole tiles into a 4-stage ring
 *      with plain bulk copies (cp.async.bulk: no tensor map, no edge
 *      handling, any alignment of the caller's matrices: the workspace is
 *      the copy engine's only source); two consumer warpgroups do nothing
 *      but wgmma and meet the producer at mbarriers, `full` (a stage's bytes
 *      have landed) and `empty` (the stage's wgmmas have finished reading it).
 *
 * Tile parameters: 128 x 256 x 32 block tile: each consumer warpgroup owns 64 rows and issues
 * two m64n128k8 per k-step of 8, 128 accumulators a thread. Against the
 * 128 x 128 tile of the unrounded experiment, a stage brings 48 KiB for twice
 * the FLOPs of 32 KiB: a quarter less shared-memory and L2 traffic per FLOP.
 * The consumers keep one tile's wgmma group in flight while they issue the
 * next (wait_group 1), so the tensor cores do not idle between tiles, and
 * the sums stay in the tensor core's FP32 accumulators, as in rung 17's
 * mma.sync path and cuBLAS's TF32 mode. Blocks walk the output in groups of
 * kGroupRows block rows, column by column, so the blocks resident together
 * share their A and B tiles in L2.
 *
 * Limits: sm_90a only (elsewhere rung 17 runs); a workspace of (m + n) x k floats (rounded up to whole
 * tiles) for the duration of the call, from a stream-ordered memory pool
 * (kernels/support/workspace_pool.c); 4 x 48 KiB stages, one block per SM.
 * Stacks: the launches of one product (a pack pass and the GEMM, a pair
 * per K panel) serve the whole stack: the pack pass packs every product's
 * operands (a shared operand once) and the product index is grid z. Where
 * this path declines, rung 17 runs the stack product by product.
 * Next: rung 20 buys FP32 accuracy back on this path, as rung 18 did on
 * rung 17's.
 */
#ifndef FASTSGEMM_LADDER_19_TF32
#define FASTSGEMM_LADDER_19_TF32

#include "engine/pack.cuh"
#include "ladder/18_tf32x3_mma.cu"  // the ladder so far; this rung calls rung 17 only through its launcher

namespace fsg {
namespace lesson {
using namespace ::fsg::hopper;  // the Hopper machinery (engine/pack.cuh), until the Hopper lessons carry their own

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
 * a parameter that changes nothing) so that rung 20, which includes this file,
 * gets no second definition of it: a template is emitted only where used. */
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
}  // namespace lesson
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
/* Registered as kernel="tf32:lesson": one product at a time (a stack runs product by product). kernel="tf32"
 * runs the engine's copy of this code (kernels/engine/tf32.cuh), with stacks in one launch. */
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_tf32_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, &fsg::hopper::kOneProduct, stream, fsg::lesson::tf32::launch,
                                            fsg_tf32_mma_sgemm);
}
#endif

#endif /* FASTSGEMM_LADDER_19_TF32 */
