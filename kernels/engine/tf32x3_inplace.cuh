/*
 * engine/tf32x3_inplace.cuh: the production kernel with no pack pass, behind kernel="tf32x3_inplace" (and the
 * orientation, tensor maps and epilogue that tf32_tma reuses). The idea is rung 22's lesson
 * (kernels/ladder/22_tf32x3_inplace.cu): both operands arrive raw by tensor copies; the k-contiguous one (S) is
 * split in place in shared memory by three split warps, the other (R) in the consumers' registers, and where B
 * is row-major the kernel computes B^T A^T.
 *
 * Production parts: a persistent grid over every product's (or split-K slice's) output tiles, a programmatic
 * dependent launch (launch_overlapped) so that a stack's call starts while the kernel before it drains, and
 * tf32x3_regs:direct (engine/tf32x3_regs_direct.cu) where no operand is k-contiguous or the copy engine cannot
 * read one; tf32x3_mma where wgmma is not had.
 *
 * Tile parameters: 128 x 128 x 32 output tile, four 48 KiB stages (S hi, S lo, raw R). Built for sm_90a only.
 * The launchers are in engine/tf32x3_inplace.cu.
 */
#ifndef FASTSGEMM_ENGINE_TF32X3_INPLACE_CUH
#define FASTSGEMM_ENGINE_TF32X3_INPLACE_CUH

#include "engine/tf32x3_regs.cuh"

namespace fsg {
namespace hopper {
namespace tf32x3_inplace {

// ---- tile parameters ----
constexpr int kTile = 128;                     // output tile: 128 rows of R x 128 rows of S
constexpr int kPartFloats = kTile * kBK;       // one 128 x 32 tile of FP32: 16 KiB
constexpr int kStageFloats = 3 * kPartFloats;  // S (hi once split), S lo, raw R
constexpr int kStages = 4;
constexpr int kSplitThreads = 96;          // warps 1-3 of the producer warpgroup (warp 0: the copies)
constexpr int kStepsAtOnce = 2;            // R's fragments of two k-steps held at once, as rung 21's
constexpr int kBoxRows = 32;               // a row-contiguous R comes in boxes of 32 rows x 32 k (128 bytes wide)

struct Layout {
    static constexpr size_t kRingBytes = pipeline_smem_bytes(kStages, kStageFloats);  // stages, full, empty
    static constexpr size_t kSmemBytes = kRingBytes + kStages * sizeof(uint64_t);     // then `landed`
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have");
};

// ---- overlapped launches ----
/* A stack of small products takes about 20 us on the H100, and a few of them
 * are the launch: the gap between one kernel's end and the next one's start,
 * and the next block's set-up. A programmatic dependent launch takes them off
 * the critical path of back-to-back calls: the next kernel is launched while
 * this one runs, its blocks set up shared memory and barriers as SMs free
 * up, and only then wait for this grid to finish (griddepcontrol.wait: the
 * previous grid complete and its memory visible). Nothing global is touched
 * before the wait, so the products read what the kernel before wrote and
 * write nothing it still reads. */
__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void allow_next_grid() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* kernel<<<grid, threads, smem, stream>>>(args...) as a programmatic dependent
 * launch: it may start before the previous kernel in the stream ends (its
 * blocks wait for it: wait_for_previous_grid). A stream that is capturing a
 * CUDA graph gets a plain launch: a graph already spares most of the gap
 * between kernels, and CUDA versions before 12.3 do not record the
 * overlapped kind in a graph. */
template <typename... Params, typename... Args>
cudaError_t launch_overlapped(void (*kernel)(Params...), dim3 grid, int threads, size_t smem, cudaStream_t stream,
                              const Args &...args) {
    cudaError_t err = fsg_allow_dynamic_smem(reinterpret_cast<const void *>(kernel), smem);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (err == cudaSuccess) err = cudaStreamIsCapturing(stream, &capture);
    if (err != cudaSuccess) return err;
    cudaLaunchAttribute overlap[1];
    overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = overlap;
    config.numAttrs = capture == cudaStreamCaptureStatusNone ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

// ---- kernel ----
/* Element (r, k) of raw R's 128 x 32 tile. Along k (R's rows k-contiguous in
 * memory): one tensor box, rung 21's layout (operand_offset). Otherwise four
 * boxes of 32 rows, each 32 lines of k of 128 bytes, chunks swizzled by k % 8. */
template <bool R_ALONG_K>
__device__ __forceinline__ int raw_r_offset(int r, int k) {
    if constexpr (R_ALONG_K) return operand_offset(r, k);
    else return (r / kBoxRows) * kBoxRows * kBK + k * kBoxRows + ((((r % kBoxRows) / 4) ^ (k % 8)) * 4) + r % 4;
}

/* A consumer thread's fragments of R for k-steps first_step .. + STEPS - 1,
 * split as the pack pass splits (hi + lo = R, both TF32), in wgmma's register
 * layout: rows row and row + 8, k col and col + 4 of each k-step. Along k it is
 * rung 21's code; across, a row-contiguous R puts the thread's rows r and r + 8
 * in one box (r % 32 < 24), and k % 8 is col or col + 4, so the four bases are
 * fixed and each k-step moves them by 8 lines. A warp's 32 reads meet 16
 * banks there (two lines of k share the chunk positions): a two-way conflict. */
template <bool R_ALONG_K, int STEPS>
__device__ __forceinline__ void split_r_fragments(const float *raw_r, int row, int col, int first_step,
                                                  uint32_t (&hi)[STEPS][4], uint32_t (&lo)[STEPS][4]) {
    if constexpr (R_ALONG_K) {
        tf32x3_regs::split_fragments<false, STEPS>(raw_r, row, col, first_step, hi, lo);
    } else {
        // k % 8 is col + 4 (i / 2) at every k-step, so a k-step moves each of the four offsets by 8 lines of k:
        // written so, the four are loop-invariant sums that ptxas keeps (or recomputes) cheaply. Written as
        // raw_r_offset(r, k) of the whole k, the k-loop held 274 instructions an iteration, not 232
        // (benchmarks/sass_loops.py).
        const float *first = raw_r + 8 * kBoxRows * first_step;
#pragma unroll
        for (int j = 0; j < STEPS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                split_rn(first[raw_r_offset<false>(row + 8 * (i % 2), col + 4 * (i / 2)) + 8 * kBoxRows * j],
                         hi[j][i], lo[j][i]);
    }
}

/* The split warps' share of a stage: S's 128 x 32 tile, as the copy engine
 * landed it, rewritten in place as hi, with lo at the same offset of s_lo.
 * Split thread p takes 16-byte chunks p, p + 96, ...: a warp's reads and
 * writes are 512 contiguous bytes, all banks. */
__device__ __forceinline__ void split_in_place(float *s, float *s_lo, int p) {
    constexpr int kChunks = kPartFloats / 4;
#pragma unroll
    for (int j = 0; j < (kChunks + kSplitThreads - 1) / kSplitThreads; ++j) {
        if (p + kSplitThreads * j >= kChunks) break;
        const int at = 4 * (p + kSplitThreads * j);
        const float4 x = *reinterpret_cast<const float4 *>(s + at);
        uint32_t h[4], l[4];
        split_rn(x.x, h[0], l[0]);
        split_rn(x.y, h[1], l[1]);
        split_rn(x.z, h[2], l[2]);
        split_rn(x.w, h[3], l[3]);
        *reinterpret_cast<uint4 *>(s + at) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4 *>(s_lo + at) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

/* What the kernel needs of the orientation: R and S's tensor maps (x is each
 * matrix's contiguous direction, z the product), and which of them are the
 * products' own (a coordinate z per product) rather than shared. */
struct Operands {
    int64_t rows_r, rows_s;  // the output tile grid: rows of R x rows of S
    bool own_r, own_s;
};

/* The consumers' epilogue for one 64 x 128 slice of an output tile whose
 * top-left element is O(row0, col0), O = R S^T: O is D, or D^T where the
 * kernel runs transposed (each result then goes to D(col, row), with C read
 * there too).
 * A slice wholly inside D with no C (beta 0) is stored from one pointer at
 * fixed offsets: about 3 instructions a value, where store_d's bounds, C and
 * 64-bit address arithmetic took 23. For a stack of 128^3 products (four
 * k-tiles a tile) the generic epilogue took a third of the consumers' time
 * (benchmarks/NOTES.md).
 * Not transposed, a thread's two results in adjacent columns go out as one
 * 8-byte store where the address allows, so that a warp's store fills whole
 * 32-byte sectors instead of every other 4 bytes of them twice: 32.4 -> 24.4
 * us a call for 256 products of 128^3 with B column-major on the H100, 88 ->
 * 60 us for attention's Q K^T over 96 heads of 512 x 64 (benchmarks/NOTES.md,
 * "Paired stores"). Transposed, a warp's store already writes whole 32-byte
 * runs (eight rows of O are eight adjacent floats of D). */
template <bool TRANSPOSED, typename Value>
__device__ __forceinline__ void store_output(const fsg_gemm &g, int64_t row0, int64_t col0, Value &&value) {
    const int64_t rows = TRANSPOSED ? g.n : g.m, cols = TRANSPOSED ? g.m : g.n;
    if (g.c == nullptr && row0 + kWgRows <= rows && col0 + kTile <= cols) {
        const int64_t row_step = TRANSPOSED ? 1 : g.ldd, col_step = TRANSPOSED ? g.ldd : 1;  // O's steps in D
        const Position first = first_accumulator(row0, col0);
        float *corner = g.d + first.row * row_step + first.col * col_step;
        if constexpr (!TRANSPOSED) {
            // The pairs lie a multiple of 8 floats from the corner, so an aligned corner aligns them all; an even
            // ldd gives every lane's corner the same alignment, so that the warp takes one branch.
            if (reinterpret_cast<uintptr_t>(corner) % 8 == 0 && g.ldd % 2 == 0) {
#pragma unroll
                for (int i = 0; i < kTile / 2; i += 2)
                    *reinterpret_cast<float2 *>(corner + 8 * ((i % 4) / 2) * g.ldd + 8 * (i / 4)) =
                        make_float2(g.alpha * value(i), g.alpha * value(i + 1));
                return;
            }
        }
#pragma unroll
        for (int i = 0; i < kTile / 2; ++i)  // accumulator i: 8 ((i % 4) / 2) rows and 8 (i / 4) + i % 2 columns on
            corner[8 * ((i % 4) / 2) * row_step + (8 * (i / 4) + i % 2) * col_step] = g.alpha * value(i);
    } else if constexpr (TRANSPOSED) {
        for_each_accumulator<kTile>(row0, col0, [&](int i, int64_t row, int64_t col) {
            if (col < g.m && row < g.n) store_d(g, col, row, value(i));
        });
    } else {
        store_slice<kTile>(g, row0, col0, value);
    }
}

/* The copy thread of a block (this kernel's and tf32_tma's): tile q of the block's
 * sequence (its items' k-tiles, one after another) into stage q % STAGES,
 * once the consumers are done with tile q - STAGES there (empty): S's
 * S_ROWS x 32 box at the stage's start, R's R_ROWS rows at R_AT (one box along
 * k, or boxes of kBoxRows rows across it), both completing on landed. */
template <bool R_ALONG_K, int STAGES, int STAGE_FLOATS, int R_ROWS, int S_ROWS, int R_AT>
__device__ __forceinline__ void copy_tiles(float *stages, uint64_t *landed, uint64_t *empty, const CUtensorMap &r_map,
                                           const CUtensorMap &s_map, const fsg_gemm &problem, const fsg_batch &batch,
                                           const Operands &operands, int64_t items) {
    const int tiles_r = (int)ceil_div(operands.rows_r, R_ROWS), tiles_s = (int)ceil_div(operands.rows_s, S_ROWS);
    const bool in_batch = batch.count > 1;
    int64_t q = 0;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const WorkItem w = work_item(item, tiles_r, tiles_s);
        const int count = (int)ceil_div(slice_or_product(problem, batch, w.z).k, kBK);
        const int product = in_batch ? (int)w.z : 0, r0 = w.tile_m * R_ROWS, s0 = w.tile_n * S_ROWS;
        const int r_product = operands.own_r ? product : 0, s_product = operands.own_s ? product : 0;
        const int64_t k0 = in_batch ? 0 : w.z * problem.k_slice;  // a split-K slice's first k
        for (int t = 0; t < count; ++t, ++q) {
            const int s = (int)(q % STAGES), k = (int)(k0 + (int64_t)t * kBK);
            if (q >= STAGES) mbarrier_wait(&empty[s], (int)(q / STAGES - 1) & 1);
            float *stage = stages + s * STAGE_FLOATS, *raw_r = stage + R_AT;
            mbarrier_arrive_expect(&landed[s], (S_ROWS + R_ROWS) * kBK * sizeof(float));
            tensor_load_3d(stage, &s_map, k, s0, s_product, &landed[s]);
            if constexpr (R_ALONG_K) {
                tensor_load_3d(raw_r, &r_map, k, r0, r_product, &landed[s]);
            } else {
#pragma unroll
                for (int box = 0; box < R_ROWS / kBoxRows; ++box)
                    tensor_load_3d(raw_r + box * kBoxRows * kBK, &r_map, r0 + box * kBoxRows, k, r_product,
                                   &landed[s]);
            }
        }
    }
}

/* One block: the producer warpgroup (thread 0 the copies, warps 1-3 the
 * split), then two consumer warpgroups. R_ALONG_K: R's rows are k-contiguous in memory.
 * TRANSPOSED: R is B^T and S is A (the result is D^T); otherwise R is A and
 * S is B^T. `items`: the output tiles of every slice or product. */
template <bool R_ALONG_K, bool TRANSPOSED>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tf32x3_inplace_kernel(const __grid_constant__ CUtensorMap r_map, const __grid_constant__ CUtensorMap s_map,
                                fsg_gemm problem, fsg_batch batch, Operands operands, int64_t items) {
    extern __shared__ __align__(1024) float4 smem[];  // swizzle atoms must be 1024-byte aligned
    uint64_t *landed = reinterpret_cast<uint64_t *>(reinterpret_cast<char *>(smem) + Layout::kRingBytes);
    if (threadIdx.x == 0)  // before start_ring's fence and __syncthreads
        for (int s = 0; s < kStages; ++s) mbarrier_init(&landed[s], 1);
    const StageRing ring = start_ring<kStages, kStageFloats, kSplitThreads>(smem);
    // Launched overlapped (see the launcher): everything above touched only shared memory and the parameters;
    // from here on the block reads and writes global memory, so it waits until the kernel before it in the
    // stream has finished and its writes are visible. Without an overlapped launch the wait returns at once.
    wait_for_previous_grid();
    float *const stages = ring.stages;
    uint64_t *const full = ring.full, *const empty = ring.empty;
    const int tiles_r = (int)ceil_div(operands.rows_r, kTile), tiles_s = (int)ceil_div(operands.rows_s, kTile);
    const int tid = threadIdx.x;
    auto depth_tiles = [&](int64_t z) { return (int)ceil_div(slice_or_product(problem, batch, z).k, kBK); };

    if (tid < 128) {
        registers_down<kProducerRegisters>();
        if (tid == 0) {
            // The copies, on a thread of their own, so that they run as far ahead as the stages allow while the
            // split warps wait for bytes.
            copy_tiles<R_ALONG_K, kStages, kStageFloats, kTile, kTile, 2 * kPartFloats>(
                stages, landed, empty, r_map, s_map, problem, batch, operands, items);
            // Every copy is issued: the next kernel in the stream may be launched. Its blocks start on the SMs
            // this grid leaves free (at once on idle ones, where the grid is smaller than the GPU) and wait
            // (above) until this grid has finished.
            allow_next_grid();
        } else if (tid >= 32) {
            // The split: each tile as soon as its bytes have landed.
            int64_t at = 0;
            for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
                const int count = depth_tiles(work_item(item, tiles_r, tiles_s).z);
                for (int t = 0; t < count; ++t, ++at) {
                    const int s = (int)(at % kStages);
                    mbarrier_wait(&landed[s], (int)(at / kStages) & 1);
                    float *stage = stages + s * kStageFloats;
                    split_in_place(stage, stage + kPartFloats, tid - 32);
                    fence_proxy_async();  // these stores, before the consumers' wgmmas read them
                    mbarrier_arrive(&full[s]);
                }
            }
        }
    } else {
        registers_up<kConsumerRegisters>();
        const int consumer = tid / 128 - 1, warp = (tid % 128) / 32, lane = tid % 32;
        const int row = consumer * kWgRows + warp * 16 + lane / 4, col = lane % 4;  // as rung 21's
        int64_t at = 0;  // the tile's place in the stages' sequence
        for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
            const WorkItem w = work_item(item, tiles_r, tiles_s);
            const fsg_gemm g = slice_or_product(problem, batch, w.z);
            const int count = (int)ceil_div(g.k, kBK);
            float corr[64] = {}, main[64] = {}, part[64];  // as rung 21's
            for (int t = 0; t < count; ++t, ++at) {
                const int s = (int)(at % kStages), parity = (int)(at / kStages) & 1;
                mbarrier_wait(&full[s], parity);
                mbarrier_wait(&landed[s], parity);  // R's bytes: done already (S's split waited on it)
                const float *s_hi = stages + s * kStageFloats, *s_lo = s_hi + kPartFloats;
                const float *raw_r = s_lo + kPartFloats;
#pragma unroll
                for (int half = 0; half < tf32x3_regs::kKSteps / kStepsAtOnce; ++half) {
                    uint32_t r_hi[kStepsAtOnce][4], r_lo[kStepsAtOnce][4];
                    split_r_fragments<R_ALONG_K>(raw_r, row, col, half * kStepsAtOnce, r_hi, r_lo);
                    tf32x3_regs::three_products<kStepsAtOnce, 64, TRANSPOSED>(part, corr, r_hi, r_lo, s_hi, s_lo,
                                                                             half * kStepsAtOnce);
                }
                mbarrier_arrive(&empty[s]);
#pragma unroll
                for (int i = 0; i < 64; ++i) main[i] += part[i];
            }
            store_output<TRANSPOSED>(g, (int64_t)w.tile_m * kTile + consumer * kWgRows, (int64_t)w.tile_n * kTile,
                                     [&](int i) { return combine(main[i], corr[i]); });
        }
    }
}

// ---- launcher ----
/* A tensor map of one operand: `along` elements in its contiguous direction,
 * `across` lines of ld floats, `products` matrices `step` floats apart (1
 * where the products share it), boxes of box_along x box_across in the
 * 128-byte swizzle, zeros outside. False where the copy engine cannot read it
 * so: an address or a stride that is not a multiple of 16 bytes, coordinates
 * past an int, or no encoder. `type`: FP32 as it lies, or TF32 (rounded to
 * nearest as the copy lands: tf32_tma). */
inline bool operand_map(const float *p, int64_t ld, int64_t along, int64_t across, int64_t products, int64_t step,
                        int box_along, int box_across, CUtensorMap *map,
                        CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32) {
    const int64_t limit = INT32_MAX - kTile;  // the largest coordinate a tile may start at, and its box's reach
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || ld % 4 != 0 || ld < along ||
        (products > 1 && (step <= 0 || step % 4 != 0)) || along > limit || across > limit || products > INT32_MAX)
        return false;
    const tf32x3_regs::EncodeTiled encode = tf32x3_regs::encode_tiled();
    if (encode == nullptr) return false;
    const cuuint64_t sizes[3] = {(cuuint64_t)along, (cuuint64_t)across, (cuuint64_t)products};
    const cuuint64_t line = (cuuint64_t)ld * sizeof(float);
    const cuuint64_t strides[2] = {line, products > 1 ? (cuuint64_t)step * sizeof(float) : line};
    const cuuint32_t box[3] = {(cuuint32_t)box_along, (cuuint32_t)box_across, 1}, unit[3] = {1, 1, 1};
    return encode(map, type, 3, const_cast<float *>(p), sizes, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* How a call runs on this kernel's block (and tf32_tma's): which operand wgmma
 * reads from shared memory (S, k-contiguous in the caller's matrix) and which
 * from registers (R), their tensor maps (R in tiles of r_rows rows, S of
 * s_rows, elements of `type`), and the persistent grid: one block per SM,
 * or per output tile where there are fewer. */
struct Orientation {
    bool transposed;  // B row-major (so A too): S is A, R is B^T, the result D^T
    Operands operands;
    CUtensorMap r_map, s_map;
    int64_t items;  // the output tiles of every slice or product
    dim3 grid;
};

/* False where the call cannot run so: k == 0, no k-contiguous operand, a
 * matrix the copy engine cannot read (operand_map), or a grid past an int. */
inline cudaError_t orient(const fsg_gemm *g, const fsg_batch &batch, int r_rows, int s_rows, CUtensorMapDataType type,
                          Orientation *o, bool *possible) {
    *possible = false;
    if (g->k == 0 || (g->a_trans && !g->b_trans) || g->k_slice % kBK != 0 || batch.count > kFsgMaxBatch)
        return cudaSuccess;
    o->transposed = !g->b_trans;  // B row-major: then A is row-major (above), and S is A
    const bool in_batch = batch.count > 1;
    const bool own_a = in_batch && batch.step_a != 0, own_b = in_batch && batch.step_b != 0;
    const int64_t products_a = own_a ? batch.count : 1, products_b = own_b ? batch.count : 1;
    bool mapped;
    if (o->transposed) {  // S = A (k contiguous), R = B^T: B row-major, its rows of n contiguous
        o->operands = {g->n, g->m, own_b, own_a};
        mapped = operand_map(g->a, g->lda, g->k, g->m, products_a, batch.step_a, kBK, s_rows, &o->s_map, type) &&
                 operand_map(g->b, g->ldb, g->n, g->k, products_b, batch.step_b, kBoxRows, kBK, &o->r_map, type);
    } else {  // S = B^T (B column-major: k contiguous), R = A either way
        o->operands = {g->m, g->n, own_a, own_b};
        mapped = operand_map(g->b, g->ldb, g->k, g->n, products_b, batch.step_b, kBK, s_rows, &o->s_map, type) &&
                 (g->a_trans
                      ? operand_map(g->a, g->lda, g->m, g->k, products_a, batch.step_a, kBoxRows, kBK, &o->r_map, type)
                      : operand_map(g->a, g->lda, g->k, g->m, products_a, batch.step_a, kBK, r_rows, &o->r_map, type));
    }
    const int64_t tiles = ceil_div(o->operands.rows_r, r_rows) * ceil_div(o->operands.rows_s, s_rows);
    // operand_map keeps a kTile-row tile's coordinates inside an int; a larger tile needs its own margin.
    if (!mapped || tiles > INT32_MAX || o->operands.rows_r > INT32_MAX - r_rows ||
        o->operands.rows_s > INT32_MAX - s_rows)
        return cudaSuccess;
    int sms;
    cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    o->items = tiles * grid_z(*g, batch);
    o->grid = dim3((unsigned)(o->items < sms ? o->items : sms));
    *possible = true;
    return cudaSuccess;
}

/* This rung on one product, a batch or split-K's slices. *launched stays
 * false where it declines (orient's reasons). */
inline cudaError_t launch(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    *launched = false;
    Orientation o;
    bool possible;
    const cudaError_t err = orient(g, batch, kTile, kTile, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, &o, &possible);
    if (err != cudaSuccess || !possible) return err;
    auto run = [&](auto kernel) {
        return launch_overlapped(kernel, o.grid, kThreads, Layout::kSmemBytes, stream, o.r_map, o.s_map, *g, batch,
                                 o.operands, o.items);
    };
    const cudaError_t launch_err = o.transposed ? run(wgmma_tf32x3_inplace_kernel<false, true>)
                                   : g->a_trans ? run(wgmma_tf32x3_inplace_kernel<false, false>)
                                                : run(wgmma_tf32x3_inplace_kernel<true, false>);
    *launched = true;
    const cudaError_t last = cudaGetLastError();  // read, which also clears it, either way
    return launch_err != cudaSuccess ? launch_err : last;
}

/* Where this rung declines, rung 21's direct path (the engine's, kernels/engine/tf32x3_regs_direct.cu, through
 * its launcher, which runs tf32x3_mma itself where it declines in turn): no pack pass either, the same numbers. */
inline cudaError_t launch_else_direct(const fsg_gemm *g, const fsg_batch &batch, cudaStream_t stream, bool *launched) {
    const cudaError_t err = launch(g, batch, stream, launched);
    if (err != cudaSuccess || *launched) return err;
    *launched = true;
    return fsg_tf32x3_regs_direct_batch_sgemm(g, &batch, stream);
}

}  // namespace tf32x3_inplace
}  // namespace hopper
}  // namespace fsg


#endif  // FASTSGEMM_ENGINE_TF32X3_INPLACE_CUH
