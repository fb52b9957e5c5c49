/*
 * engine/tf32_tma.cu: the production TF32 kernel with no pack pass, behind kernel="tf32_tma". The idea is rung
 * 23's lesson (kernels/ladder/23_tf32_tma.cu): tensor maps of type TF32, so the copy engine rounds each operand
 * to nearest as it lands; wgmma reads the k-contiguous operand from shared memory and the other from registers
 * where its k is not contiguous, in tf32x3_inplace's orientation (engine/tf32x3_inplace.cuh).
 *
 * Production parts: the persistent grid over every product's output tiles, and tf32's packed path
 * (engine/tf32.cuh) where the copy engine cannot read the operands or none is k-contiguous; tf32_mma where wgmma
 * is not had. Built for sm_90a only.
 */

#include "engine/tf32x3_inplace.cuh"

namespace fsg {
namespace hopper {
namespace tf32_tma {

// ---- tile parameters ----
constexpr int kR = 128, kS = 256;            // output tile: 128 rows of R x 256 rows of S
constexpr int kSHalves = kS / 128;           // the accumulators' halves of 128 columns (wgmma_64x256x8)
constexpr int kRFloats = kR * kBK;           // R: 128 x 32, 16 KiB
constexpr int kSFloats = kS * kBK;           // S: 256 x 32, 32 KiB
constexpr int kStageFloats = kSFloats + kRFloats;
constexpr int kStages = 4;
constexpr int kKSteps = kBK / 8;  // wgmma k-steps of 8 per k-tile
constexpr size_t kSmemBytes = pipeline_smem_bytes(kStages, kStageFloats);
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
using tf32x3_inplace::kBoxRows;
using tf32x3_inplace::Operands;

// ---- kernel ----
/* A consumer thread's fragments of R (rows k-contiguous in memory: no) for a
 * whole k-tile, in wgmma's register layout (rows row and row + 8, k col and
 * col + 4 of each k-step), as the copy engine landed them: already TF32. */
__device__ __forceinline__ void load_fragments(const float *raw_r, int row, int col, uint32_t (&a)[kKSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int k = 8 * ks + col + 4 * (i / 2);
            a[ks][i] = __float_as_uint(raw_r[tf32x3_inplace::raw_r_offset<false>(row + 8 * (i % 2), k)]);
        }
}

/* touch_registers for a whole k-tile's fragments: kept unchanged up to here, where their wgmmas are done. */
__device__ __forceinline__ void keep_fragments(uint32_t (&a)[kKSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) touch_registers(a[ks]);
}

/* One k-tile's products, acc += R S^T over its four k-steps, as one committed
 * wgmma group: R from this thread's fragments (a), two m64n128k8 a k-step, or,
 * where R's rows are k-contiguous and so lie in wgmma's own layout, straight
 * from shared memory (this consumer's 64 rows of r), as S always is, one
 * m64n256k8 a k-step. */
template <bool R_ALONG_K>
__device__ __forceinline__ void products(float (&acc)[2][64], const uint32_t (&a)[kKSteps][4], const float *r,
                                         const float *s) {
    wgmma_fence();  // the fragments' (and the accumulators') registers are written: wgmma may read them
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
        if constexpr (R_ALONG_K) {
            wgmma_64x256x8(acc, descriptor(r + 8 * ks), descriptor(s + 8 * ks), 1);
        } else {
#pragma unroll
            for (int j = 0; j < kSHalves; ++j)
                wgmma_64x128x8_rs(acc[j], a[ks], descriptor(s + j * 128 * kBK + 8 * ks), 1);
        }
    }
    wgmma_commit();
}

/* One block: the producer warpgroup (thread 0 issues the tensor copies), then
 * two consumer warpgroups. R_ALONG_K: R's rows are k-contiguous in memory.
 * TRANSPOSED: R is B^T and S is A (the result is D^T); otherwise R is A and
 * S is B^T. `items`: the output tiles of every slice or product. */
template <bool R_ALONG_K, bool TRANSPOSED>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32_tma_kernel(const __grid_constant__ CUtensorMap r_map, const __grid_constant__ CUtensorMap s_map,
                          fsg_gemm problem, fsg_batch batch, Operands operands, int64_t items) {
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    const StageRing ring = start_ring<kStages, kStageFloats>(smem);
    float *const stages = ring.stages;
    uint64_t *const full = ring.full, *const empty = ring.empty;
    const int tiles_r = (int)ceil_div(operands.rows_r, kR), tiles_s = (int)ceil_div(operands.rows_s, kS);
    const int tid = threadIdx.x;

    if (tid < 128) {
        registers_down<kProducerRegisters>();
        if (tid == 0)
            tf32x3_inplace::copy_tiles<R_ALONG_K, kStages, kStageFloats, kR, kS, kSFloats>(
                stages, full, empty, r_map, s_map, problem, batch, operands, items);
    } else {
        registers_up<kConsumerRegisters>();
        const int consumer = tid / 128 - 1, warp = (tid % 128) / 32, lane = tid % 32;
        const int row = consumer * kWgRows + warp * 16 + lane / 4, col = lane % 4;  // as rung 21's
        int64_t at = 0;  // the tile's place in the stages' sequence
        for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
            const WorkItem w = work_item(item, tiles_r, tiles_s);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            const int count = (int)ceil_div(g.k, kBK);
            float acc[kSHalves][64] = {};  // summed from zero, as rung 19's: the same bits (a -0 sum included)
            // Across k, R's fragments come from registers, two sets, tile by tile in turn: a tile's wgmmas read
            // theirs while the next tile's are loaded into the other. `step` is written out twice (even and odd
            // tiles) so that each set stays in registers of its own. Along k there are none (products).
            uint32_t even[kKSteps][4], odd[kKSteps][4];
            auto step = [&](int t, uint32_t(&mine)[kKSteps][4], uint32_t(&other)[kKSteps][4]) {
                const int s = (int)((at + t) % kStages);
                mbarrier_wait(&full[s], (int)((at + t) / kStages) & 1);
                const float *stage = stages + s * kStageFloats, *raw_r = stage + kSFloats;
                if constexpr (!R_ALONG_K) load_fragments(raw_r, row, col, mine);
                products<R_ALONG_K>(acc, mine, raw_r + consumer * kWgRows * kBK, stage);
                wgmma_wait<1>();  // tile t - 1's group is done: its stage may be refilled, its fragments reused
                if constexpr (!R_ALONG_K) keep_fragments(other);
                if (t > 0) mbarrier_arrive(&empty[(at + t - 1) % kStages]);
            };
            for (int t = 0; t < count; t += 2) {
                step(t, even, odd);
                if (t + 1 < count) step(t + 1, odd, even);
            }
            wgmma_wait_all();
            mbarrier_arrive(&empty[(at + count - 1) % kStages]);
            at += count;
#pragma unroll
            for (int j = 0; j < kSHalves; ++j) touch(acc[j]);
            if constexpr (!R_ALONG_K) {  // read by the last wgmmas until the wait: not reused before it
                keep_fragments(even);
                keep_fragments(odd);
            }
            const int64_t row0 = (int64_t)w.tile_m * kR + consumer * kWgRows;
#pragma unroll
            for (int j = 0; j < kSHalves; ++j)
                tf32x3_inplace::store_output<TRANSPOSED>(g, row0, (int64_t)w.tile_n * kS + j * 128,
                                                   [&](int i) { return acc[j][i]; });
        }
    }
}

// ---- launcher ----
/* This rung on one product, a batch or split-K's slices, in tf32x3_inplace's
 * orientation, with tensor maps of type TF32 (the copy engine rounds).
 * *launched stays false where it declines (tf32x3_inplace's orient: no k-contiguous
 * operand, or a matrix the copy engine cannot read). */
inline cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    tf32x3_inplace::Orientation o;
    bool possible;
    const cudaError_t err = tf32x3_inplace::orient(g, batch, kR, kS, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, &o, &possible);
    if (err != cudaSuccess || !possible) return err;
    auto run = [&](auto kernel) {
        launch_with_smem(kernel, o.grid, kThreads, kSmemBytes, stream, o.r_map, o.s_map, *g, batch, o.operands,
                         o.items);
    };
    if (o.transposed) run(wgmma_tf32_tma_kernel<false, true>);
    else if (g->a_trans) run(wgmma_tf32_tma_kernel<false, false>);
    else run(wgmma_tf32_tma_kernel<true, false>);
    *launched = true;
    return cudaGetLastError();
}

/* Where this rung declines, rung 19's packed path: the same numbers. */
inline cudaError_t launch_else_packed(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    const cudaError_t err = launch(g, batch, stream, launched);
    if (err != cudaSuccess || *launched) return err;
    return tf32::launch(g, batch, stream, launched);
}

}  // namespace tf32_tma
}  // namespace hopper
}  // namespace fsg

// ---- launchers ----
extern "C" cudaError_t fsg_tf32_tma_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32_tma_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

/* A batch: every product's output tiles on one persistent grid, a shared operand read where it lies. */
extern "C" cudaError_t fsg_tf32_tma_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32_tma::launch_else_packed,
                                            fsg_tf32_mma_sgemm);
}
