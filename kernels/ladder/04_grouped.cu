/*
 * Rung 4, grouped: blocks take their tiles in an order that keeps the tiles
 * they share in L2.
 *
 * Rung 3's blocks share tiles of A and B through L2, but only if the blocks
 * resident at one time share them. Taken in launch order, the 264 resident
 * blocks (two per SM) cover two rows of D's tiles and read all of B: L2's hit
 * rate was 39% at 4096^3 (98% at 2048^3). Here block `id` takes its tile in
 * groups of 16 tile rows, column by column inside a group (grouped_block_tile
 * below): the resident blocks then read 16 row panels of A and about 16
 * column panels of B, 16 MiB, which stay in L2. The kernel is rung 3's; only
 * the line that finds the block's tile changed.
 *
 * Tile parameters: rung 3's (32 x 32 x 32, 1,024 threads). The group of 16
 * tile rows is the best of 8, 16 and 32 (benchmarks/NOTES.md): a gain at
 * 4096^3 here and for tile1d and bankfree, neutral for tile2d and vectorized.
 * Rungs 5 to 12 all keep this order.
 * Limits: m <= 65535 * 32. Each FMA still needs two shared-memory loads.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 5 makes each thread compute several outputs, reusing a value
 * loaded from shared memory across them.
 */
#ifndef FASTSGEMM_LADDER_04_GROUPED
#define FASTSGEMM_LADDER_04_GROUPED

#include "common.cuh"

namespace fsg {
namespace grouped {

// ---- tile parameters ----
constexpr int kTile = 32;
constexpr int kThreads = kTile * kTile;

}  // namespace grouped

// ---- kernel ----
/* Cooperative copy of the ROWS x COLS block at (row0, col0) of a rows x cols
 * matrix (stored as TRANS says) into shared memory, through store(r, c, v).
 * Elements past the matrix's edges are stored as 0, so the product loop needs
 * no bounds checks and partial tiles cost nothing extra. Consecutive threads
 * take consecutive addresses in whichever direction the matrix is contiguous,
 * so the warp's reads coalesce for both layouts. */
template <int ROWS, int COLS, int THREADS, bool TRANS, typename Index, typename Store>
__device__ __forceinline__ void load_tile(const float *p, Index ld, Index rows, Index cols, Index row0, Index col0,
                                          int tid, Store &&store) {
    static_assert((ROWS * COLS) % THREADS == 0,
                  "every thread copies the same number of elements, so ROWS * COLS must be a multiple of THREADS");
    constexpr int kContiguous = TRANS ? ROWS : COLS;
#pragma unroll
    for (int i = 0; i < ROWS * COLS / THREADS; ++i) {
        const int e = tid + i * THREADS;
        const int along = e % kContiguous, across = e / kContiguous;
        const int r = TRANS ? along : across, c = TRANS ? across : along;
        const Index gr = row0 + r, gc = col0 + c;
        store(r, c, (gr < rows && gc < cols) ? p[at<TRANS>(gr, gc, ld)] : 0.0f);
    }
}

/* The output tile a block computes, when blocks do not take the tiles in
 * launch order: block `id` (0 .. tiles_m * tiles_n - 1) walks them in groups
 * of `group` tile rows, column by column inside a group (the last group may
 * have fewer rows). */
struct TileCoord {
    int row, col;
};
template <typename Int>
__host__ __device__ inline TileCoord grouped_tile(Int id, Int tiles_m, Int tiles_n, Int group) {
    const Int per_group = group * tiles_n, first = id / per_group * group;
    const Int rows = tiles_m - first < group ? tiles_m - first : group;
    return {(int)(first + id % per_group % rows), (int)(id % per_group / rows)};
}

/* This block's tile: the 2-D launch grid (gridDim.x tiles across, gridDim.y
 * down) numbered row by row, then grouped by kGroupTileRows tile rows. */
constexpr unsigned kGroupTileRows = 16;
__device__ __forceinline__ TileCoord grouped_block_tile() {
    // 32 bits suffice: the extension keeps both M and N within 65535 tiles (each rung's max_dim).
    const unsigned id = blockIdx.y * gridDim.x + blockIdx.x;
    return grouped_tile<unsigned>(id, gridDim.y, gridDim.x, kGroupTileRows);
}

namespace grouped {

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads) grouped_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kTile][kTile];  // As[r][p] = A(row0 + r, k0 + p)
    __shared__ float Bs[kTile][kTile];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x, tx = tid % kTile, ty = tid / kTile;
    const TileCoord tile = grouped_block_tile();
    const Index row0 = (Index)tile.row * kTile, col0 = (Index)tile.col * kTile;

    float acc = 0.0f;
    for (Index k0 = 0; k0 < Index(g.k); k0 += kTile) {
        load_tile<kTile, kTile, kThreads, A_TRANS, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid,
                                                          [&](int r, int c, float v) { As[r][c] = v; });
        load_tile<kTile, kTile, kThreads, B_TRANS, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid,
                                                          [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();  // the tiles are complete before anyone reads them
        // Fully unrolled where indices are 32-bit; the 64-bit instantiations (offsets past 2^31) need the
        // registers the full unroll takes for their addresses, and would spill.
#pragma unroll(sizeof(Index) == 4 ? kTile : kTile / 2)
        for (int p = 0; p < kTile; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }
    const Index row = row0 + ty, col = col0 + tx;
    if (row < g.m && col < g.n) store_d(g, row, col, acc);
}

}  // namespace grouped
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_grouped_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::grouped;
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kTile), (unsigned)fsg::ceil_div(g->m, kTile), fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        grouped_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value>
            <<<grid, kThreads, 0, stream>>>(*g);
    });
}

#endif /* FASTSGEMM_LADDER_04_GROUPED */
