/*
 * Rung 3, smem: shared-memory cache blocking.
 *
 * A block of 32 x 32 threads computes a 32 x 32 tile of D. It slides along k
 * in steps of 32: each step, the block copies a 32 x 32 tile of A and one of B
 * into shared memory (each thread copies one element of each, coalesced for
 * either layout, zero past the matrix's edges), waits, and then every thread
 * does 32 FMAs reading only shared memory. Each element fetched from global
 * memory is now used 32 times instead of once.
 *
 * The tiles of A and B that blocks share are cached one level up, in L2, if
 * the blocks resident at one time share them. Taken in launch order, the 264
 * resident blocks (two per SM) cover two rows of D's tiles and read all of B:
 * L2's hit rate was 39% at 4096^3 (98% at 2048^3). So blocks take their tiles
 * in groups of 16 tile rows, column by column (fsg::grouped_block_tile): 16
 * row panels of A and about 16 column panels of B at a time, 16 MiB. Measured
 * +6% at 4096^3; rungs 4 to 7 keep this order (tile1d +9%).
 *
 * Each thread finds its elements of the next tiles through pointers moved on
 * by one tile per step (fsg::SlidingTile), not by recomputing their indices
 * and bounds: +5% at 4096^3.
 *
 * Tile parameters: BM = BN = BK = 32: one element per thread per tile, and a
 * warp reading Bs[p][tx] touches 32 consecutive floats (32 banks, no conflict)
 * while As[ty][p] is one broadcast address.
 * Limits: m <= 65535 * 32. Each FMA still needs two shared-memory loads, and
 * shared-memory bandwidth now caps the rung.
 * Next: rung 4 makes each thread compute several outputs, reusing a value
 * loaded from shared memory across them.
 */
#include "common.cuh"

namespace {

constexpr int kTile = 32;
constexpr int kThreads = kTile * kTile;

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads) smem_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = fsg::this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kTile][kTile];  // As[r][p] = A(row0 + r, k0 + p)
    __shared__ float Bs[kTile][kTile];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x, tx = tid % kTile, ty = tid / kTile;
    const fsg::TileCoord tile = fsg::grouped_block_tile();
    const Index row0 = (Index)tile.row * kTile, col0 = (Index)tile.col * kTile;

    float acc = 0.0f;
    fsg::SlidingTile<kTile, kTile, kThreads, A_TRANS, false, Index> a_tiles(g.a, g.lda, g.m, g.k, row0, 0, tid);
    fsg::SlidingTile<kTile, kTile, kThreads, B_TRANS, true, Index> b_tiles(g.b, g.ldb, g.k, g.n, 0, col0, tid);
    for (Index tiles_left = fsg::ceil_div(g.k, kTile); tiles_left > 0; --tiles_left) {
        a_tiles.load_next(tid, [&](int r, int c, float v) { As[r][c] = v; });
        b_tiles.load_next(tid, [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int p = 0; p < kTile; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }
    const Index row = row0 + ty, col = col0 + tx;
    if (row < g.m && col < g.n) fsg::store_d(g, row, col, acc);
}

}  // namespace

extern "C" cudaError_t fsg_smem_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kTile), (unsigned)fsg::ceil_div(g->m, kTile), fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        smem_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value><<<grid, kThreads, 0, stream>>>(*g);
    });
}
