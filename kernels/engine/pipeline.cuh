/*
 * engine/pipeline.cuh: the warp-specialized block both wgmma rungs (19 tf32,
 * 20 tf32x3) run: one producer warpgroup fills a ring of shared-memory stages,
 * two consumer warpgroups do nothing but wgmma, and they meet at mbarriers
 * (full: a stage's bytes have landed; empty: its wgmmas have read it). Only
 * files compiled for sm_90a may include it.
 */
#ifndef FASTSGEMM_ENGINE_PIPELINE_CUH
#define FASTSGEMM_ENGINE_PIPELINE_CUH

#include "engine/ptx.cuh"
#include "engine/tile_order.cuh"

namespace fsg {
namespace hopper {

/* One producer warpgroup (a single thread of it issues the bulk copies; it
 * keeps 40 registers) and two consumer warpgroups that own 64 rows of the
 * block tile each and do nothing but wgmma: 128 x 40 + 256 x 232 registers
 * fit the 384 x 168 the block starts with. Blocks walk the output in groups
 * of kGroupRows block rows (start_block, below). */
constexpr int kProducerThreads = 128, kConsumerThreads = 256;  // one warpgroup, two
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kWgRows = 64;  // rows of D per consumer warpgroup
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
constexpr int kGroupRows = 8;

// The order in which blocks, or a persistent block's work items, take the output tiles (engine/tile_order.cuh).
using engine::grouped_tile;
using engine::TileCoord;

/* Dynamic shared memory of a pipeline: its stages, then a full and an empty barrier per stage. */
constexpr size_t pipeline_smem_bytes(int stages, int stage_floats) {
    return (size_t)stages * stage_floats * sizeof(float) + 2 * (size_t)stages * sizeof(uint64_t);
}

/* Where a consumer warpgroup's 64 x N result of wgmma m64nN (N = 128 unless
 * given) lies, its top-left element at (row0, col0): visit(i, row, col) for
 * each of the thread's accumulators. Accumulator i (of N / 2) is element
 * i % 4 of n8 block i / 4 in the m16n8 fragment layout. */
template <int N = 128, typename Visit>
__device__ __forceinline__ void for_each_accumulator(int64_t row0, int64_t col0, Visit &&visit) {
    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    const int64_t first_row = row0 + warp * 16 + lane / 4, first_col = col0 + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) visit(i, first_row + 8 * ((i % 4) / 2), first_col + 8 * (i / 4) + i % 2);
}
/* for_each_accumulator's position of accumulator 0 (the others lie at fixed offsets from it). Not used by
 * for_each_accumulator itself: written that way, nvcc allocated rung 21's direct kernel's registers otherwise. */
struct Position {
    int64_t row, col;
};
__device__ __forceinline__ Position first_accumulator(int64_t row0, int64_t col0) {
    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    return {row0 + warp * 16 + lane / 4, col0 + 2 * (lane % 4)};
}

/* The epilogue: that result, whose top-left element is D(row0, col0), into D
 * through store_d; value(i) is what to store for accumulator i. */
template <int N = 128, typename Value>
__device__ __forceinline__ void store_slice(const fsg_gemm &g, int64_t row0, int64_t col0, Value &&value) {
    for_each_accumulator<N>(row0, col0, [&](int i, int64_t row, int64_t col) {
        if (row < g.m && col < g.n) store_d(g, row, col, value(i));
    });
}

/* What both Hopper kernels do first, every thread of the block: carve the
 * dynamic shared memory (STAGES stages of STAGE_FLOATS floats, then a full
 * and an empty barrier per stage: pipeline_smem_bytes), have thread 0
 * initialise the barriers (full: PRODUCERS arrivals) before the block's first
 * __syncthreads, and find the block's output tile (BM x BN). Blocks take the
 * tiles in groups of kGroupRows block rows, column by column inside a group,
 * so that the blocks resident together share their A and B tiles in L2
 * instead of each wave sweeping all of B. */
struct BlockStart {
    float *stages;
    uint64_t *full, *empty;
    int tile_m, tile_n;
};
struct StageRing {
    float *stages;
    uint64_t *full, *empty;
};
template <int STAGES, int STAGE_FLOATS, int PRODUCERS = 1>
__device__ __forceinline__ StageRing start_ring(float4 *smem) {
    StageRing ring;
    ring.stages = reinterpret_cast<float *>(smem);
    ring.full = reinterpret_cast<uint64_t *>(ring.stages + STAGES * STAGE_FLOATS);
    ring.empty = ring.full + STAGES;
    if (threadIdx.x == 0) init_stage_barriers(ring.full, ring.empty, STAGES, PRODUCERS, kConsumerThreads);
    __syncthreads();
    return ring;
}
template <int STAGES, int STAGE_FLOATS, int BM, int BN, int PRODUCERS = 1>
__device__ __forceinline__ BlockStart start_block(float4 *smem, const fsg_gemm &g) {
    const StageRing ring = start_ring<STAGES, STAGE_FLOATS, PRODUCERS>(smem);
    const TileCoord tile = grouped_tile<int>(blockIdx.x, (int)ceil_div(g.m, BM), (int)ceil_div(g.n, BN), kGroupRows);
    return {ring.stages, ring.full, ring.empty, tile.row, tile.col};
}

/* A persistent grid (one block per SM, each taking items gridDim.x apart) numbers its work items product by
 * product (or split-K slice by slice: grid z's meaning; rung 24: modulus by modulus), each product's output
 * tiles in start_block's order. */
struct WorkItem {
    int64_t z;
    int tile_m, tile_n;
};
__device__ __forceinline__ WorkItem work_item(int64_t item, int tiles_m, int tiles_n) {
    const int64_t per_product = (int64_t)tiles_m * tiles_n, z = item / per_product;
    const TileCoord tile = grouped_tile<int>((int)(item - z * per_product), tiles_m, tiles_n, kGroupRows);
    return {z, tile.row, tile.col};
}

/* Grid z is either split-K's slices or a batch's products (ladder.h's
 * fsg_batch; never both). The block's own problem: its K-slice (common.cuh's
 * this_slice) or its product, A, B, C and D moved on by the batch's steps.
 * The SIMT rungs, which run a batch product by product, keep this_slice
 * alone. kOneProduct: the batch of an ordinary call. */
constexpr fsg_batch kOneProduct = {1, 0, 0, 0, 0};

inline unsigned grid_z(const fsg_gemm &g, const fsg_batch &batch) {
    return batch.count > 1 ? (unsigned)batch.count : slice_count(g);
}

__device__ __forceinline__ fsg_gemm slice_or_product(const fsg_gemm &problem, const fsg_batch &batch, int64_t z) {
    // One chain of offsets from the kernel's parameters, with no branch between two copies of the problem: with
    // one (an early `return this_slice(problem)`), nvcc lost that D and C are global memory and stored the
    // epilogue with generic ST.E in place of STG.E, and tf32x3 ran 2-3% slower at 2048^3-4096^3.
    const bool in_batch = batch.count > 1;  // then k_slice is 0: the launchers refuse both at once
    const int64_t slice = in_batch ? 0 : z, product = in_batch ? z : 0;
    const int64_t k0 = slice * problem.k_slice;
    fsg_gemm g = problem;
    g.a += (problem.a_trans ? k0 * problem.lda : k0) + product * batch.step_a;
    g.b += (problem.b_trans ? k0 : k0 * problem.ldb) + product * batch.step_b;
    if (g.c != nullptr) g.c += product * batch.step_c;
    g.k = problem.k_slice > 0 && problem.k - k0 > problem.k_slice ? problem.k_slice : problem.k - k0;
    g.d += slice * problem.m * problem.ldd + product * batch.step_d;
    return g;
}
__device__ __forceinline__ fsg_gemm this_slice_or_product(const fsg_gemm &problem, const fsg_batch &batch) {
    return slice_or_product(problem, batch, blockIdx.z);
}

/* Split-K (ladder.h's k_slice, grid z): the packed k-tiles the block's slice
 * consumes, out of the tiles_k that pack the whole K for each row tile. The
 * launcher takes only a k_slice of whole tiles, so every slice starts on one. */
struct SliceTiles {
    int first, count;
};
__device__ __forceinline__ SliceTiles slice_tiles(const fsg_gemm &problem, int tiles_k) {
    if (problem.k_slice == 0) return {0, tiles_k};
    const int64_t per = problem.k_slice / kBK, first = blockIdx.z * per;
    return {(int)first, (int)(per < tiles_k - first ? per : tiles_k - first)};
}

/* The producer's side of the stage ring, for one thread: for each of
 * tiles_k tiles, wait until its stage's previous tile has been read (empty),
 * announce the stage's bytes (full) and have copy(t, stage, bar) issue the
 * bulk copies that fill the stage, completing on bar. */
template <int STAGES, int STAGE_FLOATS, typename Copy>
__device__ __forceinline__ void produce_stages(float *stages, uint64_t *full, uint64_t *empty, int tiles_k,
                                               Copy &&copy) {
    for (int t = 0; t < tiles_k; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) mbarrier_wait(&empty[s], (t / STAGES - 1) & 1);  // tile t - STAGES is read
        mbarrier_arrive_expect(&full[s], STAGE_FLOATS * sizeof(float));
        copy(t, stages + s * STAGE_FLOATS, &full[s]);
    }
}

}  // namespace hopper
}  // namespace fsg

#endif  // FASTSGEMM_ENGINE_PIPELINE_CUH
