/*
 * engine/tf32x3_regs.cuh: the production kernel with A split in the consumers' registers, behind
 * kernel="tf32x3_regs" and tf32x3_regs:4steps, and the consumers' split that tf32x3_regs:direct
 * (engine/tf32x3_regs_direct.cu) and tf32x3_inplace reuse. The idea is rung 21's lesson
 * (kernels/ladder/21_tf32x3_regs.cu): A arrives raw by tensor copies and each consumer thread splits its own
 * fragments; only B goes through the pack pass.
 *
 * Production parts: A's tensor map is 3-D (k, row, product), so a batch's products come from one map; a K panel
 * starts past k-tile 0 (a_k_tile0); STEPS_AT_ONCE = 4 is tf32x3_regs:4steps; where the copy engine cannot read A
 * (column-major, unaligned) tf32x3's packed kernel runs, and tf32x3_mma where wgmma is not had.
 *
 * Tile parameters: 128 x 128 x 32, four 48 KiB stages (raw A, B hi, B lo). Built for sm_90a only. The launchers
 * are in engine/tf32x3_regs.cu.
 */
#ifndef FASTSGEMM_ENGINE_TF32X3_REGS_CUH
#define FASTSGEMM_ENGINE_TF32X3_REGS_CUH

#include <cuda.h>  // CUtensorMap and the driver's tensor-map encoder, reached through the runtime

#include "engine/tf32x3.cuh"

namespace fsg {
namespace hopper {
namespace tf32x3_regs {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 128;  // block tile: one tensor box of A, one packed tile of B
static_assert(kBN == kPackRows, "B's block tile is one packed tile");
constexpr int kAFloats = kBM * kBK;                       // raw A: 128 rows x 32 k, FP32, 16 KiB
constexpr int kStageFloats = kAFloats + 2 * kTileFloats;  // raw A, B hi, B lo: 48 KiB
constexpr int kStages = 4;
constexpr size_t kSmemBytes = pipeline_smem_bytes(kStages, kStageFloats);
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile
constexpr int kStepsAtOnce = 2;   // k-steps whose A fragments are held at once (below)
static_assert(kKSteps % kStepsAtOnce == 0, "whole groups of k-steps per k-tile");
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");

// ---- kernel ----
/* Element (r, k) of a raw A tile (128 rows x 32 k, FP32) in shared memory.
 * Row-major A (k contiguous) lies as a packed tile does: rows of 128 bytes,
 * 16-byte chunk c of row r at position c ^ (r % 8) (the tensor copy's
 * 128-byte swizzle). A column-major A (the direct path's only: rows
 * contiguous) lies k by k, 128 rows each, its 16-byte chunks of 4 rows
 * XOR-ed with 2 (k % 4). Either way the 8 rows x 4 k a quarter warp reads for
 * one fragment register fall in 32 different banks. */
template <bool A_TRANS>
__device__ __forceinline__ int raw_a_offset(int r, int k) {
    if constexpr (A_TRANS) return k * kBM + (((r / 4) ^ (2 * (k % 4))) * 4) + r % 4;
    else return operand_offset(r, k);
}

/* A consumer thread's share of k-steps first_step .. first_step + STEPS - 1
 * of a raw A tile, split as rung 20's pack pass splits (hi + lo = A, both
 * TF32), in wgmma's register layout: the thread's rows are row and row + 8,
 * its k col and col + 4 of each k-step. */
template <bool A_TRANS, int STEPS>
__device__ __forceinline__ void split_fragments(const float *raw_a, int row, int col, int first_step,
                                                uint32_t (&hi)[STEPS][4], uint32_t (&lo)[STEPS][4]) {
    if constexpr (A_TRANS) {
        // k % 4 is col for every element the thread reads: each of its two rows is one base plus k * kBM.
        const float *rows[2] = {raw_a + raw_a_offset<true>(row, col), raw_a + raw_a_offset<true>(row + 8, col)};
#pragma unroll
        for (int j = 0; j < STEPS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                split_rn(rows[i % 2][(8 * (first_step + j) + 4 * (i / 2)) * kBM], hi[j][i], lo[j][i]);
    } else {
        // Element (row + 8 (i % 2), k), k = 8 ks + col + 4 (i / 2), lies in chunk 2 ks + i / 2 of its row, at chunk
        // position (2 ks + i / 2) ^ (row % 8), the same for row + 8. One XOR and an add a value, worked out here
        // rather than 8 addresses kept across the main loop: those spilled to local memory.
        const float *a_row = raw_a + row * kBK + col;  // this thread's row of the tile, at its k in chunk 0
        int swizzle = (row % 8) * 4;                   // the swizzle's XOR on the row's float offsets
        asm volatile("" : "+r"(swizzle));              // made here, each time: not hoisted into a live register
#pragma unroll
        for (int j = 0; j < STEPS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int chunk = 2 * (first_step + j) + i / 2;
                split_rn(a_row[((chunk * 4) ^ swizzle) + (i % 2) * 8 * kBK], hi[j][i], lo[j][i]);
            }
    }
}

/* Rung 20's three products on STEPS k-steps (first_step on) of a stage, A
 * from this thread's fragments, B hi and lo (BN rows, K-major) from shared
 * memory: part (+)= hi_a hi_b (afresh at the tile's first k-step), corr +=
 * lo_a hi_b + hi_a lo_b, in rung 20's order; issued, then waited for. The
 * fragments are kept unchanged until the wait: the wgmmas read them as they run.
 * LO_B_FIRST adds the two corrections the other way round: rung 22 multiplies
 * B^T A^T, where its register operand is B, and so keeps rung 20's order. */
template <int STEPS, int HALF_BN, bool LO_B_FIRST = false>
__device__ __forceinline__ void three_products(float (&part)[HALF_BN], float (&corr)[HALF_BN],
                                               uint32_t (&a_hi)[STEPS][4], uint32_t (&a_lo)[STEPS][4],
                                               const float *b_hi, const float *b_lo, int first_step) {
    wgmma_fence();  // the fragments' registers are written: wgmma may read them
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        const int ks = first_step + j;
        const uint64_t db = descriptor(b_hi + 8 * ks);
        wgmma_64xNx8_rs(part, a_hi[j], db, ks > 0);
        if constexpr (LO_B_FIRST) {
            wgmma_64xNx8_rs(corr, a_hi[j], descriptor(b_lo + 8 * ks), 1);
            wgmma_64xNx8_rs(corr, a_lo[j], db, 1);
        } else {
            wgmma_64xNx8_rs(corr, a_lo[j], db, 1);
            wgmma_64xNx8_rs(corr, a_hi[j], descriptor(b_lo + 8 * ks), 1);
        }
    }
    wgmma_commit();
    wgmma_wait_all();
    touch(corr);
    touch(part);
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {  // read by the wgmmas until the wait: not reused before it
        touch_registers(a_hi[j]);
        touch_registers(a_lo[j]);
    }
}

/* D = alpha A B + beta C: A's k-tiles by tensor copies from the caller's
 * matrix (a_map: x = k, y = row of A, z = product), B's from the packed B.
 * The block's split-K slice takes its own run of k-tiles; a batch's product
 * its own A (z, where A is not shared), packed B (step_b) and D. a_k_tile0:
 * where this call's K starts in A's tensor map, in k-tiles (a K panel of
 * with_packed_operands starts past 0). */
template <int STEPS_AT_ONCE = kStepsAtOnce>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_regs_kernel(const __grid_constant__ CUtensorMap a_map, fsg_gemm problem, fsg_batch batch,
                             const float *packed_b, int tiles_k, int64_t step_b, int a_k_tile0) {
    const fsg_gemm g = this_slice_or_product(problem, batch);  // this block's K-slice, or product
    packed_b += blockIdx.z * step_b;                          // step_b is 0 but in a batch
    const SliceTiles slice = slice_tiles(problem, tiles_k);
    extern __shared__ __align__(1024) float4 smem[];  // the tensor copy's 128-byte swizzle wants 1024-byte alignment
    // stages: [kStages][raw A, B hi, B lo]
    const auto [stages, full, empty, tile_m, tile_n] = start_block<kStages, kStageFloats, kBM, kBN>(smem, g);
    const int tid = threadIdx.x, warpgroup = tid / 128;

    if (warpgroup == 0) {
        // Producer: one thread, a tensor copy of A and a bulk copy of B's hi and lo per stage.
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            const float *b = packed_b + ((int64_t)tile_n * tiles_k + slice.first) * 2 * kTileFloats;
            const int a_row = tile_m * kBM, a_product = batch.count > 1 && batch.step_a != 0 ? (int)blockIdx.z : 0;
            const int a_k_tile = a_k_tile0 + slice.first;
            auto copy = [&](int t, float *stage, uint64_t *bar) {
                tensor_load_3d(stage, &a_map, (a_k_tile + t) * kBK, a_row, a_product, bar);
                bulk_load(stage + kAFloats, b + (int64_t)t * 2 * kTileFloats, 2 * kTileBytes, bar);
            };
            produce_stages<kStages, kStageFloats>(stages, full, empty, slice.count, copy);
        }
    } else {
        registers_up<kConsumerRegisters>();
        const int consumer = warpgroup - 1, warp = (tid % 128) / 32, lane = tid % 32;
        // This thread's rows of A (and of wgmma's A fragment): row and row + 8; its k: col and col + 4 of each k-step.
        const int row = consumer * kWgRows + warp * 16 + lane / 4, col = lane % 4;
        float corr[64] = {};  // the corrections, summed by the tensor core
        float main[64] = {};  // the main term's running sum (FADD), as rung 20
        float part[64];       // this tile's main term, out of the tensor core
        for (int t = 0; t < slice.count; ++t) {
            const int s = t % kStages;
            mbarrier_wait(&full[s], (t / kStages) & 1);
            const float *a = stages + s * kStageFloats;
            const float *b_hi = a + kAFloats, *b_lo = b_hi + kTileFloats;
            // The fragments of STEPS_AT_ONCE k-steps at a time: two (the rung's own; a wait between the halves of
            // the tile, while the other consumer's wgmmas keep the tensor cores busy) or four (4steps).
#pragma unroll
            for (int half = 0; half < kKSteps / STEPS_AT_ONCE; ++half) {
                uint32_t a_hi[STEPS_AT_ONCE][4], a_lo[STEPS_AT_ONCE][4];
                split_fragments<false>(a, row, col, half * STEPS_AT_ONCE, a_hi, a_lo);
                three_products(part, corr, a_hi, a_lo, b_hi, b_lo, half * STEPS_AT_ONCE);
            }
            mbarrier_arrive(&empty[s]);  // this stage's reads are done: the producer may refill it
            // The other consumer's wgmmas keep the tensor cores busy while these FADDs run.
#pragma unroll
            for (int i = 0; i < 64; ++i) main[i] += part[i];
        }
        store_slice<kBN>(g, (int64_t)tile_m * kBM + consumer * kWgRows, (int64_t)tile_n * kBN,
                         [&](int i) { return combine(main[i], corr[i]); });
    }
}

// ---- launcher ----
using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled, found once through the runtime (the
 * extension links no driver library); null where the driver lacks it. */
inline EncodeTiled encode_tiled() {
    static const EncodeTiled found = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult status;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) !=
                cudaSuccess ||
            status != cudaDriverEntryPointSuccess)
            fn = nullptr;
        if (fn == nullptr) (void)cudaGetLastError();  // a failed query is not the caller's error: not left pending
        return reinterpret_cast<EncodeTiled>(fn);
    }();
    return found;
}

/* A's tensor map: x = k (contiguous), y = row, z = product (one, where the
 * products share A), boxes of 32 k x 128 rows in the 128-byte swizzle, zeros
 * outside. False, and no map, where the copy engine cannot read A so: A
 * column-major, an address or a stride it cannot take (16-byte multiples),
 * or no encoder. */
inline bool a_tensor_map(const fsg_gemm &g, const fsg_batch &batch, CUtensorMap *map) {
    const bool own_a = batch.count > 1 && batch.step_a != 0;
    if (g.a_trans || reinterpret_cast<uintptr_t>(g.a) % 16 != 0 || g.lda % 4 != 0 ||
        (own_a && batch.step_a % 4 != 0) || g.k > INT32_MAX || g.m > INT32_MAX - kBM)  // coordinates are int32
        return false;
    const EncodeTiled encode = encode_tiled();
    if (encode == nullptr) return false;
    const cuuint64_t sizes[3] = {(cuuint64_t)g.k, (cuuint64_t)g.m, own_a ? (cuuint64_t)batch.count : 1};
    const cuuint64_t row_bytes = (cuuint64_t)g.lda * sizeof(float);
    const cuuint64_t strides[2] = {row_bytes, own_a ? (cuuint64_t)batch.step_a * sizeof(float) : row_bytes};
    const cuuint32_t box[3] = {kBK, kBM, 1}, unit[3] = {1, 1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float *>(g.a), sizes, strides, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* This rung on one product or a batch: B packed (hi and lo) by rung 20's pass,
 * A read raw by tensor copies. *launched stays false where A cannot be read so
 * (a_tensor_map) or the packed path declines (launch_on_packed's reasons). */
template <int STEPS_AT_ONCE = kStepsAtOnce>
cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    const int64_t tiles_m = ceil_div(g->m, kBM), tiles_n = ceil_div(g->n, kBN);
    if (tiles_m * tiles_n > INT32_MAX || g->k_slice % kBK != 0 || batch.count > kFsgMaxBatch ||
        ceil_div(g->k, kBK) > INT32_MAX / kBK)
        return cudaSuccess;
    CUtensorMap a_map;
    if (!a_tensor_map(*g, batch, &a_map)) return cudaSuccess;
    return with_packed_operands<2>(
        *g, batch, 0, tiles_n, stream, launched,  // no row tiles of A: only B is packed
        [&](const fsg_gemm &problem, const fsg_batch &products, const float *, const float *packed_b, int tiles_k,
            int64_t, int64_t step_b) {
            const int a_k_tile0 = (int)((problem.a - g->a) / kBK);  // the K panel's first k-tile
            const dim3 grid((unsigned)(tiles_m * tiles_n), 1, grid_z(problem, products));
            launch_with_smem(wgmma_tf32x3_regs_kernel<STEPS_AT_ONCE>, grid, kThreads, kSmemBytes, stream, a_map, problem,
                             products, packed_b, tiles_k, step_b, a_k_tile0);
        });
}

/* Where this rung declines, rung 20's own configuration: the same numbers. */
template <int STEPS_AT_ONCE>
cudaError_t launch_else_tf32x3(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    const cudaError_t err = launch<STEPS_AT_ONCE>(g, batch, stream, launched);
    if (err != cudaSuccess || *launched) return err;
    return tf32x3::launch<tf32x3::kBM>(g, batch, stream, launched);
}

}  // namespace tf32x3_regs
}  // namespace hopper
}  // namespace fsg


#endif  // FASTSGEMM_ENGINE_TF32X3_REGS_CUH
