/*
 * Rung 5, tile1d: each thread computes TM results down one column of D.
 *
 * In rungs 3 and 4 every FMA cost two shared-memory loads. Here a thread owns TM = 8
 * consecutive rows of one column: for each p it loads B(p, col) from shared
 * memory once into a register and uses it for 8 FMAs, each needing only its
 * A element (a broadcast, since the whole warp shares those rows). About 9
 * shared loads per 8 FMAs instead of 16.
 *
 * Tile parameters: a 64 x 64 tile of D per block, BK = 8, TM = 8, so
 * 64 * 64 / 8 = 512 threads; each copies exactly one element of the 64 x 8
 * A tile and one of the 8 x 64 B tile per step. The warp's 32 threads cover
 * 32 consecutive columns of one group of 8 rows. The tiles come through
 * rung 3's load_tile, and blocks take their tiles in rung 4's order (faster
 * at 4096^3 than launch order).
 * Limits: m <= 65535 * 64. Still one shared load of B per FMA column, and
 * 8 accumulators is not enough work per thread to hide latency.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 6 tiles in two dimensions (TM x TN per thread): outer products
 * of register fragments.
 */
#ifndef FASTSGEMM_LADDER_05_TILE1D
#define FASTSGEMM_LADDER_05_TILE1D

#include "common.cuh"

namespace fsg {
namespace tile1d {

// ---- tile parameters ----
constexpr int kBM = 64, kBN = 64, kBK = 8, kTM = 8;
constexpr int kThreads = kBM * kBN / kTM;
static_assert(kBM % kTM == 0, "each thread's TM rows must tile BM exactly");
static_assert(kThreads == kBM * kBK && kThreads == kBK * kBN,
              "each thread copies exactly one element of each tile per step");

}  // namespace tile1d

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

namespace tile1d {

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads) tile1d_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kBM][kBK];
    __shared__ float Bs[kBK][kBN];
    const int tid = threadIdx.x;
    const int thread_col = tid % kBN, thread_row = tid / kBN;  // this thread: rows thread_row*TM .. +TM-1
    const TileCoord tile = grouped_block_tile();  // rung 4's order
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM] = {};
    for (Index k0 = 0; k0 < Index(g.k); k0 += kBK) {
        load_tile<kBM, kBK, kThreads, A_TRANS, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid,
                                                    [&](int r, int c, float v) { As[r][c] = v; });
        load_tile<kBK, kBN, kThreads, B_TRANS, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid,
                                                    [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
            const float b = Bs[p][thread_col];  // loaded once, used TM times
#pragma unroll
            for (int i = 0; i < kTM; ++i) acc[i] += As[thread_row * kTM + i][p] * b;
        }
        __syncthreads();
    }
    const Index col = col0 + thread_col;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + thread_row * kTM + i;
        if (row < g.m && col < g.n) store_d(g, row, col, acc[i]);
    }
}

}  // namespace tile1d
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_tile1d_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::tile1d;
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        tile1d_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value><<<grid, kThreads, 0, stream>>>(*g);
    });
}

#endif /* FASTSGEMM_LADDER_05_TILE1D */
