/*
 * Rung 3, smem: shared-memory cache blocking.
 *
 * A block of 32 x 32 threads computes a 32 x 32 tile of D. It slides along k
 * in steps of 32: each step, the block copies a 32 x 32 tile of A and one of B
 * into shared memory (each thread copies one element of each, coalesced for
 * either layout, zero past the matrix's edges: load_tile below), waits, and
 * then every thread does 32 FMAs reading only shared memory. Each element
 * fetched from global memory is now used 32 times instead of once.
 *
 * Tile parameters: BM = BN = BK = 32: one element per thread per tile, and a
 * warp reading Bs[p][tx] touches 32 consecutive floats (32 banks, no conflict)
 * while As[ty][p] is one broadcast address.
 * Limits: m <= 65535 * 32. Each FMA still needs two shared-memory loads, and
 * shared-memory bandwidth now caps the rung. Blocks take their tiles in
 * launch order: the 264 resident at one time (two per SM) cover two rows of
 * D's tiles and stream all of B through L2.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 4 orders the blocks so that the tiles they share stay in L2.
 */
#ifndef FASTSGEMM_LADDER_03_SMEM
#define FASTSGEMM_LADDER_03_SMEM

#include "common.cuh"

namespace fsg {
namespace smem {

// ---- tile parameters ----
constexpr int kTile = 32;
constexpr int kThreads = kTile * kTile;

}  // namespace smem

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

namespace smem {

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads) smem_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kTile][kTile];  // As[r][p] = A(row0 + r, k0 + p)
    __shared__ float Bs[kTile][kTile];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x, tx = tid % kTile, ty = tid / kTile;
    const Index row0 = (Index)blockIdx.y * kTile, col0 = (Index)blockIdx.x * kTile;

    float acc = 0.0f;
    for (Index k0 = 0; k0 < Index(g.k); k0 += kTile) {
        load_tile<kTile, kTile, kThreads, A_TRANS, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid,
                                                          [&](int r, int c, float v) { As[r][c] = v; });
        load_tile<kTile, kTile, kThreads, B_TRANS, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid,
                                                          [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int p = 0; p < kTile; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }
    const Index row = row0 + ty, col = col0 + tx;
    if (row < g.m && col < g.n) store_d(g, row, col, acc);
}

}  // namespace smem
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_smem_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::smem;
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kTile), (unsigned)fsg::ceil_div(g->m, kTile), fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        smem_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value>
            <<<grid, kThreads, 0, stream>>>(*g);
    });
}

#endif /* FASTSGEMM_LADDER_03_SMEM */
