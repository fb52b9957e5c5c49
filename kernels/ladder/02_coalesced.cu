/*
 * Rung 2, coalesced: the threads of a warp own consecutive columns of D.
 *
 * The only change from rung 1 is which grid axis runs over what: threadIdx.x
 * now runs over columns. The 32 threads of a warp then share one row: their
 * loads of A(row, p) are one address (a broadcast), their loads of B(p, col)
 * are 32 consecutive floats of a row-major B (one 128-byte transaction instead
 * of 32), and their stores to D are consecutive too. Same arithmetic, same
 * lack of reuse, several times faster.
 *
 * Tile parameters: 32 x 32 threads per block, as in rung 1.
 * Layouts: a column-major B is still read along its stride (uncoalesced);
 * rung 3 stages tiles through shared memory, which fixes that.
 * Limits: m <= 65535 * 32 (rows are now on the grid's y dimension).
 * Stacks: as rung 1, product by product, one launch each.
 * Next: every element of A and B is still fetched from global memory (or L1/L2)
 * k times; rung 3 loads each tile once into shared memory and reuses it.
 */
#include "common.cuh"

namespace {

// ---- tile parameters ----
constexpr int kBlockSide = 32;

/* The slice's problem with its moved pointers hidden from the optimizer
 * (still known to be global memory). Seeing this_slice's 64-bit advance,
 * nvcc folds it into every load's address: a 64-bit add per load and four
 * more live registers, and at the 32 registers this kernel gets (two blocks
 * of 1024 threads per SM) the loop then kept fewer loads in flight and ran at
 * half its speed (benchmarks/NOTES.md, "the split-K regression"). Hidden,
 * the advance is computed once. Not done for every rung in common.cuh: the
 * tiled rungs need the registers it pins, and spilled with it. */
__device__ __forceinline__ fsg_gemm with_opaque_pointers(fsg_gemm g) {
    asm("" : "+l"(g.a), "+l"(g.b), "+l"(g.d));
    __builtin_assume(__isGlobal(g.a));
    __builtin_assume(__isGlobal(g.b));
    __builtin_assume(__isGlobal(g.d));
    return g;
}

// ---- kernel ----
template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void coalesced_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = with_opaque_pointers(fsg::this_slice(problem));  // split-K: this block's K-slice (common.cuh)
    const Index col = (Index)blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads, consecutive columns
    const Index row = (Index)blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= Index(g.m) || col >= Index(g.n)) return;

    float acc = 0.0f;
    // The loop waits on L1 latency, so loads in flight are what counts. With
    // 32-bit indices nvcc unrolls it 16 times by itself; with the 64-bit ones
    // that offsets past 2^31 need, only 4 times unless asked (benchmarks/NOTES.md).
#pragma unroll 16
    for (Index p = 0; p < Index(g.k); ++p)
        acc += g.a[fsg::at<A_TRANS, Index>(row, p, g.lda)] * g.b[fsg::at<B_TRANS, Index>(p, col, g.ldb)];
    fsg::store_d(g, row, col, acc);
}

}  // namespace

// ---- launcher ----
extern "C" cudaError_t fsg_coalesced_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 block(kBlockSide, kBlockSide);
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBlockSide), (unsigned)fsg::ceil_div(g->m, kBlockSide),
                    fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        coalesced_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value><<<grid, block, 0, stream>>>(*g);
    });
}
