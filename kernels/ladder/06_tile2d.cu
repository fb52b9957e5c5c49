/*
 * Rung 6, tile2d: each thread computes a TM x TN tile of D as a sum of outer
 * products of register fragments.
 *
 * Rung 5 reused a B value across one column of TM results. Here each thread
 * owns an 8 x 8 tile: per p it loads TM = 8 values of A and TN = 8 values of
 * B from shared memory into registers (16 loads) and does 8 * 8 = 64 FMAs
 * with them, the outer product. Four FMAs per shared load instead of about one,
 * and 64 independent accumulators keep the FMA pipes busy.
 *
 * Tile parameters: a 128 x 128 tile of D per block, BK = 8, 8 x 8 per thread:
 * (128 / 8) * (128 / 8) = 256 threads, 64 accumulators each, capped at 128
 * registers so that two blocks fit on an SM. Each thread copies 4 elements of
 * the 128 x 8 A tile and 4 of the 8 x 128 B tile per step through rung 3's
 * load_tile; blocks take their tiles in rung 4's order.
 *
 * The engine's configuration "walked" (kernel="tile2d:walked",
 * kernels/engine/tile2d_walked.cu) is this kernel with its tiles loaded
 * through pointers moved on by a tile per step: an address-arithmetic trick,
 * not a step of the ladder (from rung 9 on the tiles load in 128-bit pieces
 * instead).
 * Limits: m <= 65535 * 128. Global loads are 32-bit; the fragment loads from
 * As[row][p] walk down a column of a row-major tile: scalar, strided.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 7 stores A transposed in shared memory, so that fragments come in
 * 128-bit loads.
 */
#ifndef FASTSGEMM_LADDER_06_TILE2D
#define FASTSGEMM_LADDER_06_TILE2D

#include "common.cuh"

namespace fsg {
namespace tile2d {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the thread tiles must cover the block tile exactly");

// Two blocks per SM: left to itself the compiler takes 174 registers, which
// fits one 256-thread block per SM (8 warps: too few to hide latency). Capped
// at 128 it needs no spills and two blocks fit (measured: see benchmarks/NOTES.md).
// The 64-bit-index instantiations, used only for offsets past 2^31, need more
// registers for addresses than 128: one block per SM rather than spill.
template <typename Index>
constexpr int kMinBlocksPerSM = sizeof(Index) == 4 ? 2 : 1;

}  // namespace tile2d

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

namespace tile2d {

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM<Index>) tile2d_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kBM][kBK];
    __shared__ float Bs[kBK][kBN];
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const TileCoord tile = grouped_block_tile();  // rung 4's order
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    auto multiply_tile = [&] {
        // Not unrolled over p: unrolled, the compiler fetches all BK values of each
        // A row at once (As[row][0..7] is contiguous) and needs 174 registers.
#pragma unroll 1
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int i = 0; i < kTM; ++i) reg_m[i] = As[thread_row * kTM + i][p];
#pragma unroll
            for (int j = 0; j < kTN; ++j) reg_n[j] = Bs[p][thread_col * kTN + j];
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
    };
    for (Index k0 = 0; k0 < Index(g.k); k0 += kBK) {
        load_tile<kBM, kBK, kThreads, A_TRANS, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid,
                                                      [&](int r, int c, float v) { As[r][c] = v; });
        load_tile<kBK, kBN, kThreads, B_TRANS, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid,
                                                      [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();
        multiply_tile();
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + thread_row * kTM + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const Index col = col0 + thread_col * kTN + j;
            if (row < g.m && col < g.n) store_d(g, row, col, acc[i][j]);
        }
    }
}

}  // namespace tile2d
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_tile2d_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg;
    using namespace fsg::tile2d;
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM), slice_count(*g));
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        tile2d_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value>
            <<<grid, kThreads, 0, stream>>>(*g);
    });
}

#endif /* FASTSGEMM_LADDER_06_TILE2D */
