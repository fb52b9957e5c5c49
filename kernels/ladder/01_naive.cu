/*
 * Rung 1, naive: one thread computes one element of D.
 *
 * Thread (x, y) of the grid owns D(row = x, col = y) and walks the whole k
 * dimension: k loads of A along its row, k loads of B down its column, one
 * fused multiply-add each. Nothing is reused on chip, so every FMA costs two
 * global loads (8 bytes for 2 FLOP), and because threadIdx.x runs over rows,
 * the 32 threads of a warp read 32 different rows of A and write 32 different
 * rows of D: every access of a warp touches 32 separate cache lines. This is
 * the baseline the ladder climbs from, far below cuBLAS (its speed: the table
 * in kernels/ladder/README.md).
 *
 * Tile parameters: 32 x 32 threads per block, the largest square block.
 * Layouts: compiled once per (A, B) row/column-major pair (fsg::for_layouts).
 * Preconditions: none beyond ladder.h; any m, n, k.
 * Limits: n <= 65535 * 32 (the grid's y dimension); the registry says so.
 * Stacks (fastsgemm.matmul): product by product, one launch of this kernel
 * each, as for a single product (csrc/operands.c, fsg_run_batch). Before
 * that, whatever the rung, a stack that shares one operand and whose other
 * operand's matrices and results lie exactly end to end (row after row, or
 * column after column) runs as one tall or wide product, where that fits
 * the kernel's largest M or N. On the rungs that take a stack in one launch
 * (19-21, 23 and 24), odd layouts, K = 0 and a lone product still go product
 * by product, and more than 65535 products (grid z) take a launch per 65535.
 * Next: rung 2 swaps the roles of x and y so a warp reads and writes
 * consecutive columns (coalescing).
 */
#include "common.cuh"

namespace {

// ---- tile parameters ----
constexpr int kBlockSide = 32;

// ---- kernel ----
template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void naive_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = fsg::this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    const Index row = (Index)blockIdx.x * blockDim.x + threadIdx.x;
    const Index col = (Index)blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= Index(g.m) || col >= Index(g.n)) return;  // the last block may overhang the matrix

    float acc = 0.0f;
    for (Index p = 0; p < Index(g.k); ++p)
        acc += g.a[fsg::at<A_TRANS, Index>(row, p, g.lda)] * g.b[fsg::at<B_TRANS, Index>(p, col, g.ldb)];
    fsg::store_d(g, row, col, acc);
}

}  // namespace

// ---- launcher ----
extern "C" cudaError_t fsg_naive_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 block(kBlockSide, kBlockSide);
    const dim3 grid((unsigned)fsg::ceil_div(g->m, kBlockSide), (unsigned)fsg::ceil_div(g->n, kBlockSide),
                    fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        naive_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value><<<grid, block, 0, stream>>>(*g);
    });
}
