/*
 * engine/pack.cuh: the pass that packs the operands of the wgmma rungs (19
 * tf32, 20 tf32x3) into ready tiles before the GEMM, and the launcher that
 * runs a GEMM kernel on them, and the dispatch between a wgmma rung and its
 * mma.sync fallback. Only files compiled for sm_90a may include it.
 */
#ifndef FASTSGEMM_ENGINE_PACK_CUH
#define FASTSGEMM_ENGINE_PACK_CUH

#include "engine/pipeline.cuh"
#include "engine/workspace.cuh"

namespace fsg {
namespace hopper {

/* The tensor cores must see operands rounded to TF32 (rung 19) or split into
 * TF32 hi and lo parts (rung 20), K-major. Doing that inside the GEMM costs
 * the producer threads a pass over shared memory, or a proxy fence per
 * thread per tile (benchmarks/NOTES.md). Instead one small kernel (both
 * operands, one launch) reads each once, in whatever layout it has, and
 * writes ready operand tiles to a workspace: kPackRows rows (m or n) x kBK
 * k, in the operand layout above, zeros past the matrix's edges, PARTS parts
 * per tile (the rounded value; or hi, then lo) one after the other. Row tile r's tiles follow each other
 * along k, so a block reads its operands as one contiguous run, and a stage
 * of the GEMM arrives by plain bulk copies: no tensor maps, no edge cases,
 * any alignment of the caller's matrices. */
constexpr int kPackRows = 128;                // rows (m or n) of one packed tile
constexpr int kTileFloats = kPackRows * kBK;  // one part of one packed tile: 16 KiB
constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
constexpr int kPackThreads = 256;

/* x = hi + lo, both TF32, with round_tf32 (nearest even; rung 18's mma.sync
 * path rounds ties away). Only ties round differently, and the split is as
 * exact either way. */
__device__ __forceinline__ void split_rn(float x, uint32_t &hi, uint32_t &lo) {
    hi = round_tf32(x);
    lo = round_tf32(x - __uint_as_float(hi));
}

/* The split product's sum: the main term plus the corrections, except where the main term is Inf or NaN, which
 * is then the answer (rung 18's header says why). */
__device__ __forceinline__ float combine(float main, float corrections) {
    return isfinite(main) ? main + corrections : main;
}

/* One operand for the pack kernel: `rows` rows (m for A, n for B) of `depth`
 * k, stored with k contiguous (along_k: element (row, k) at src[row * ld +
 * k]) or rows contiguous (src[k * ld + row]), packed into `tiles` tiles
 * (its row tiles times tiles_k) at dst; in a batch, `products` such matrices,
 * product p's at src + p * src_step, packed one after another (1 for an
 * operand the products share, which is packed once). */
struct PackOperand {
    const float *src;
    int64_t ld, rows;
    bool along_k;
    float *dst;
    int64_t tiles;
    int64_t products, src_step;
};

/* Both operands in one launch: blocks 0 .. a.tiles * a.products - 1 pack
 * A's tiles, the rest B's (one launch fewer per call: at 1024^3 a launch's gap
 * is a tenth of the GEMM). Block `id` of an operand packs product id / tiles,
 * and in it row tile id % tiles / tiles_k, k tile id % tiles_k. It passes through shared memory so that the reads, in the
 * source's order, and the writes, along k, are both whole 128-byte lines; the
 * padding column keeps the transposing case free of bank conflicts. */
template <int PARTS>
__global__ void __launch_bounds__(kPackThreads) pack_kernel(PackOperand a, PackOperand b, int64_t depth,
                                                             int64_t tiles_k) {
    static_assert(PARTS == 1 || PARTS == 2, "rounded, or split into hi and lo");
    __shared__ float tile[kPackRows][kBK + 1];
    const int64_t a_blocks = a.tiles * a.products;
    const bool is_a = blockIdx.x < a_blocks;
    PackOperand op = is_a ? a : b;
    int64_t id = is_a ? blockIdx.x : blockIdx.x - a_blocks;
    if (op.products > 1) {  // a batch: this block's product
        const int64_t product = id / op.tiles;
        id -= product * op.tiles;
        op.src += product * op.src_step;
        op.dst += product * op.tiles * PARTS * kTileFloats;
    }
    const int64_t row0 = id / tiles_k * kPackRows, k0 = id % tiles_k * kBK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kWarps = kPackThreads / 32;
    if (op.along_k) {
#pragma unroll
        for (int r = warp; r < kPackRows; r += kWarps) {  // a warp reads 32 k of one row
            const int64_t row = row0 + r, k = k0 + lane;
            tile[r][lane] = row < op.rows && k < depth ? op.src[row * op.ld + k] : 0.0f;
        }
    } else {
#pragma unroll
        for (int kk = warp; kk < kBK; kk += kWarps)  // a warp reads 32 rows at one k
#pragma unroll
            for (int r = lane; r < kPackRows; r += 32) {
                const int64_t row = row0 + r, k = k0 + kk;
                tile[r][kk] = row < op.rows && k < depth ? op.src[k * op.ld + row] : 0.0f;
            }
    }
    __syncthreads();
    float *out = op.dst + id * PARTS * kTileFloats;
#pragma unroll
    for (int r = warp; r < kPackRows; r += kWarps) {  // a warp writes one row: a 128-byte line, swizzled within
        const int at = operand_offset(r, lane);
        if constexpr (PARTS == 1) {
            out[at] = __uint_as_float(round_tf32(tile[r][lane]));
        } else {
            uint32_t hi, lo;
            split_rn(tile[r][lane], hi, lo);
            out[at] = __uint_as_float(hi);
            out[kTileFloats + at] = __uint_as_float(lo);
        }
    }
}

/* How many k-tiles of both operands one K panel packs. The workspace pool
 * keeps a 64th of the GPU's memory between calls (workspace_pool.c); a
 * workspace past that is mapped afresh on every call, which cost more than
 * the GEMM itself: tf32x3 ran 16384^3 at 74 TFLOP/s and 32768^3 at 65,
 * against 126 at 8192^3, whose 1 GiB workspace stays mapped
 * (benchmarks/NOTES.md). So a problem whose packed operands would not fit in
 * what the pool keeps is packed and multiplied in K panels that do, of equal
 * depth; each panel then adds onto D, which costs a read and a write of D per
 * panel: small against a panel's product, which is at least 8 k-tiles deep.
 * Split-K calls (k_slice > 0: small outputs, long K) keep one panel. `kept`
 * comes from fsg_workspace_pool, remembered when the pool was made: asking
 * the pool here would invalidate a stream capture. Under a device memory
 * limit (support/device_memory.c) the panels also fit in what the limit
 * still allows, `room`; a workspace that does not fit even so (8 k-tiles, or
 * a split-K call's one panel) is refused, and the path without one runs. */
template <int PARTS>
int64_t k_panel_tiles(const fsg_gemm &g, int64_t row_tiles, int64_t tiles_k, uint64_t kept, uint64_t room) {
    if (g.k_slice > 0) return tiles_k;
    uint64_t fits_in = kept == 0 ? FSG_NO_LIMIT : kept;  // kept == 0: a pool that keeps nothing
    if (room < fits_in) fits_in = room;
    if (fits_in == FSG_NO_LIMIT) return tiles_k;
    const uint64_t bytes_per_k_tile = (uint64_t)row_tiles * PARTS * kTileFloats * sizeof(float);
    const int64_t fit = (int64_t)(fits_in / bytes_per_k_tile);
    if (fit >= tiles_k) return tiles_k;
    const int64_t panels = ceil_div(tiles_k, fit > 8 ? fit : (int64_t)8);
    return ceil_div(tiles_k, panels);
}

/* Packs A (row_tiles_a row tiles) and B (row_tiles_b) into a workspace, calls
 * gemm(problem, batch, packed_a, packed_b, tiles_k, step_a, step_b) to
 * enqueue the GEMM of `problem` on `stream`, and frees the workspace after it
 * in stream order. In a batch (ladder.h) every product's operands are packed, in the one
 * launch, and step_a and step_b are the floats from one product's packed A (B)
 * to the next's: 0 for an operand the products share, packed once, and
 * outside a batch. In K panels
 * (k_panel_tiles) where the whole K would need more workspace than the pool
 * keeps: panel 0 is alpha A_0 B_0 + beta C, panel p > 0 alpha A_p B_p + D,
 * into D, in order. *launched stays false, and nothing is enqueued, when the
 * packed path cannot run: k == 0 (D = beta C, nothing to pack), grids past a
 * dimension's limit, or no memory for the workspace; the caller's mma.sync
 * path takes the call then. */
template <int PARTS, typename Gemm>
cudaError_t with_packed_operands(const fsg_gemm &g, const fsg_batch &batch, int64_t row_tiles_a, int64_t row_tiles_b,
                                 cudaStream_t stream, bool *launched, Gemm &&gemm) {
    *launched = false;
    if (g.k == 0) return cudaSuccess;
    const int64_t tiles_k = ceil_div(g.k, kBK);
    const bool stack = batch.count > 1;
    const int64_t products_a = stack && batch.step_a != 0 ? batch.count : 1;
    const int64_t products_b = stack && batch.step_b != 0 ? batch.count : 1;
    const int64_t rows_a = row_tiles_a * products_a, rows_b = row_tiles_b * products_b;  // row tiles to pack
    if ((rows_a + rows_b) * tiles_k > INT32_MAX) return cudaSuccess;  // one grid packs both
    engine::WorkspaceSource source;
    cudaError_t err = engine::workspace_source(&source);
    if (err != cudaSuccess) return err;
    const int64_t panel_tiles = k_panel_tiles<PARTS>(g, rows_a + rows_b, tiles_k, source.kept, source.room);
    const int64_t floats_a = rows_a * panel_tiles * PARTS * kTileFloats;
    const size_t bytes = (size_t)(floats_a + rows_b * panel_tiles * PARTS * kTileFloats) * sizeof(float);
    float *packed;
    err = engine::take_workspace(source, bytes, stream, &packed);
    if (err != cudaSuccess || packed == nullptr) return err;  // no workspace: the caller's path without one runs
    *launched = true;
    for (int64_t k0 = 0; k0 < g.k && err == cudaSuccess; k0 += panel_tiles * kBK) {
        fsg_gemm panel = g;  // A's columns and B's rows [k0, k0 + depth)
        fsg_batch panel_batch = batch;
        panel.a += g.a_trans ? k0 * g.lda : k0;
        panel.b += g.b_trans ? k0 : k0 * g.ldb;
        panel.k = g.k - k0 < panel_tiles * kBK ? g.k - k0 : panel_tiles * kBK;
        if (k0 > 0) {  // onto the panels before
            panel.c = g.d;
            panel.ldc = g.ldd;
            panel_batch.step_c = batch.step_d;
            panel.beta = 1.0f;
        }
        const int64_t panel_k_tiles = ceil_div(panel.k, kBK);
        const PackOperand a = {panel.a, g.lda, g.m, !g.a_trans, packed, row_tiles_a * panel_k_tiles,
                               products_a, batch.step_a};
        const PackOperand b = {panel.b, g.ldb, g.n, g.b_trans, packed + floats_a, row_tiles_b * panel_k_tiles,
                               products_b, batch.step_b};
        const int64_t step_a = products_a > 1 ? a.tiles * PARTS * kTileFloats : 0;
        const int64_t step_b = products_b > 1 ? b.tiles * PARTS * kTileFloats : 0;
        pack_kernel<PARTS><<<(unsigned)(a.tiles * products_a + b.tiles * products_b), kPackThreads, 0, stream>>>(
            a, b, panel.k, panel_k_tiles);
        gemm(panel, panel_batch, (const float *)packed, (const float *)(packed + floats_a), (int)panel_k_tiles, step_a,
             step_b);
        err = cudaGetLastError();
    }
    // A launch that fails after panel 0 leaves D holding the panels before it (and C overwritten where C is D):
    // the error goes to the caller, which raises it; nothing retries the call on another path.
    const cudaError_t freed = engine::give_workspace(packed, bytes, stream);
    return err != cudaSuccess ? err : freed;
}

/* The launcher both Hopper kernels share: kernel(g, batch, packed_a,
 * packed_b, tiles_k, step_a, step_b) as one block per BM x BN output tile, all on grid
 * x (so at most INT32_MAX of them: past that *launched stays false), and per
 * split-K slice or per product of a batch on grid z (slice_tiles; a k_slice
 * that is not whole k-tiles is declined too, and so is a batch past
 * kFsgMaxBatch), on the operands that with_packed_operands packs in PARTS
 * parts, over the whole K. B is packed in whole block tiles, BN / kPackRows row tiles
 * each, or, for a BN narrower than a packed tile, in packed tiles that
 * kPackRows / BN blocks share; the last may be partly or all zeros. */
template <int PARTS, int BM, int BN, typename Kernel>
cudaError_t launch_on_packed(Kernel kernel, size_t smem_bytes, const fsg_gemm &g, const fsg_batch &batch,
                             cudaStream_t stream, bool *launched) {
    static_assert(BM == kPackRows && (BN % kPackRows == 0 || kPackRows % BN == 0),
                  "block tiles are whole packed tiles, or whole parts of one");
    const int64_t tiles_m = ceil_div(g.m, BM), tiles_n = ceil_div(g.n, BN);
    if (tiles_m * tiles_n > INT32_MAX || g.k_slice % kBK != 0 || batch.count > kFsgMaxBatch) {
        *launched = false;
        return cudaSuccess;
    }
    return with_packed_operands<PARTS>(
        g, batch, tiles_m, ceil_div(tiles_n * BN, (int64_t)kPackRows), stream, launched,
        [&](const fsg_gemm &problem, const fsg_batch &products, const float *packed_a, const float *packed_b,
            int tiles_k, int64_t step_a, int64_t step_b) {
            const dim3 grid((unsigned)(tiles_m * tiles_n), 1, grid_z(problem, products));
            launch_with_smem(kernel, grid, kThreads, smem_bytes, stream, problem, products, packed_a, packed_b,
                             tiles_k, step_a, step_b);
        });
}

/* The launcher of the wgmma rungs (19 tf32, 20 tf32x3): their wgmma path
 * (sm90) on compute capability 9.0, the one its code is built for (sm_90a),
 * unless it declines the call (it leaves *launched false when its workspace
 * or grid cannot be had); the mma.sync rung of the same math (17 tf32_mma,
 * 18 tf32x3_mma) otherwise, which runs a batch product by product. */
inline cudaError_t wgmma_else_mma_sync(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream,
                                       cudaError_t (*sm90)(const fsg_gemm *, const fsg_batch &, cudaStream_t, bool *),
                                       cudaError_t (*mma_sync)(const fsg_gemm *, cudaStream_t)) {
    if (batch->count > 1 && g->k_slice != 0) return cudaErrorInvalidValue;  // grid z is one or the other
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = sm90(g, *batch, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return fsg_each_product(g, batch, stream, mma_sync);
}

}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_PACK_CUH
