/*
 * Rung 7, transposed: A stored transposed in shared memory, so that a thread's
 * fragments come in 128-bit shared loads.
 *
 * In rung 6 a thread's TM = 8 values of A for step p sat down a column of the
 * row-major tile As[r][p]: eight strided LDS.32, where B's 8 values, along a
 * row of Bs, were contiguous. Here A's tile is stored transposed, As[p][r]
 * (the copy into shared memory swaps the two indices), so both fragments are
 * contiguous and 16-byte aligned: two LDS.128 for A and two for B a step,
 * where rung 6 issued sixteen 32-bit shared loads (ncu: 2.5x fewer). The loop
 * over p is unrolled now: rung 6 kept it rolled because the compiler fetched
 * the contiguous A row of every p at once; the transposed tile has no such row.
 *
 * Tile parameters: as rung 6: 128 x 128 x 8 block tile, 8 x 8 per thread, 256
 * threads; each thread copies 4 elements of each tile per step, through rung
 * 3's load_tile, one float at a time.
 * Limits: m <= 65535 * 128. Global loads and the stores of D are still 32-bit;
 * the transposed stores into As collide in shared-memory banks.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 8 writes D in 128-bit stores.
 */
#ifndef FASTSGEMM_LADDER_07_TRANSPOSED
#define FASTSGEMM_LADDER_07_TRANSPOSED

#include "common.cuh"

namespace fsg {
namespace transposed {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the thread tiles must cover the block tile exactly");
static_assert(kTM % 4 == 0 && kTN % 4 == 0, "fragments are read as whole float4s");

}  // namespace transposed

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

/* Four floats from 16-byte-aligned shared memory into registers: one LDS.128. */
__device__ __forceinline__ void load4(const float *smem, float *dst) {
    const float4 v = *reinterpret_cast<const float4 *>(smem);
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
}

namespace transposed {

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads) transposed_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ __align__(16) float As[kBK][kBM];  // transposed: As[p][r] = A(row0 + r, k0 + p)
    __shared__ __align__(16) float Bs[kBK][kBN];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const TileCoord tile = grouped_block_tile();  // rung 4's order
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    for (Index k0 = 0; k0 < Index(g.k); k0 += kBK) {
        load_tile<kBM, kBK, kThreads, A_TRANS, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid,
                                                      [&](int r, int c, float v) { As[c][r] = v; });  // transposed
        load_tile<kBK, kBN, kThreads, B_TRANS, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid,
                                                      [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int i = 0; i < kTM; i += 4) load4(&As[p][thread_row * kTM + i], &reg_m[i]);
#pragma unroll
            for (int j = 0; j < kTN; j += 4) load4(&Bs[p][thread_col * kTN + j], &reg_n[j]);
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
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

}  // namespace transposed
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_transposed_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::transposed;
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        transposed_sgemm_kernel<I, kA, kB><<<grid, kThreads, 0, stream>>>(*g);
    });
}

#endif /* FASTSGEMM_LADDER_07_TRANSPOSED */
