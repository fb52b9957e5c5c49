/*
 * Rung 8, bankfree: a shared-memory layout with no bank conflicts.
 *
 * Shared memory has 32 banks of 4 bytes; a warp's access takes as many
 * wavefronts as the most requests any one bank gets (for 128-bit accesses, per
 * quarter-warp phase of 8 threads). Nsight Compute showed rung 7 paying 40% more
 * shared-load wavefronts than necessary (268M conflicts on 671M wavefronts at
 * 4096^3), from two patterns, each fixed here:
 *
 *   - Fragment loads. In rung 7 a thread's 8 columns of Bs were contiguous, so
 *     the 8 threads of an LDS.128 phase read 16 bytes every 32: two threads per
 *     bank group, a 2-way conflict. Here a thread's 8 columns are two groups of
 *     4, half a tile (64 columns) apart, and so are its 8 rows of As: the 8
 *     threads of a phase now read 8 consecutive 16-byte pieces, every bank once.
 *   - Transposed stores. A row-major A is scattered into As's columns; the two
 *     halves of a warp store to rows p and p + 4 at the same column, which
 *     without padding are 4 * 128 floats apart: the same banks. Each row of As
 *     (and Bs, which a column-major B scatters into the same way) is padded by
 *     4 floats, which moves row p + 4 by 16 banks and keeps rows 16-byte aligned
 *     for the LDS.128 fragment loads.
 *
 * Tile parameters: rung 7's: 128 x 128 x 8 block tile, 8 x 8 results per
 * thread, 256 threads, float4 global loads and stores where alignment allows.
 * Limits: m <= 65535 * 128. The global loads of tile k+1 still wait for the
 * math on tile k to finish.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 9 overlaps them (double buffering with cp.async).
 */
#ifndef FASTSGEMM_LADDER_08_BANKFREE
#define FASTSGEMM_LADDER_08_BANKFREE

#include "ladder/07_vectorized.cu"

namespace fsg {
namespace bankfree {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
constexpr int kPad = 4;  // floats added to each shared-memory row: 16 banks, and 16-byte alignment kept
static_assert(kTM == 8 && kTN == 8, "a thread's tile is two 4 x 4 quarters, half a block tile apart");
static_assert((kBM + kPad) % 4 == 0 && (kBN + kPad) % 4 == 0, "padded rows must stay 16-byte aligned");

// ---- kernel ----
template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads) bankfree_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ __align__(16) float As[kBK][kBM + kPad];  // transposed: As[p][r] = A(row0 + r, k0 + p)
    __shared__ __align__(16) float Bs[kBK][kBN + kPad];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    // This thread's rows are thread_row*4 + {0..3} and kBM/2 + thread_row*4 + {0..3}; columns likewise.
    const int frag_row = thread_row * 4, frag_col = thread_col * 4;
    const TileCoord tile = grouped_block_tile();  // rung 4's order
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    for (Index k0 = 0; k0 < Index(g.k); k0 += kBK) {
        load_tiles_vec4<kBM, kBN, kBK, kThreads, A_TRANS, B_TRANS, VEC, Index>(
            g, row0, col0, k0, tid,
            [&](int r, int p, float4 v) {
                store4_kmajor<!A_TRANS>(&As[0][0], kBM + kPad, p, r, v);  // row-major A: transposed on the way in
            },
            [&](int p, int c, float4 v) { store4_kmajor<B_TRANS>(&Bs[0][0], kBN + kPad, p, c, v); });
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
            load4(&As[p][frag_row], &reg_m[0]);
            load4(&As[p][kBM / 2 + frag_row], &reg_m[4]);
            load4(&Bs[p][frag_col], &reg_n[0]);
            load4(&Bs[p][kBN / 2 + frag_col], &reg_n[4]);
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + (i < 4 ? frag_row + i : kBM / 2 + frag_row + i - 4);
        if (row >= g.m) continue;
        store_d4(g, row, col0 + frag_col, &acc[i][0], vec_out);
        store_d4(g, row, col0 + kBN / 2 + frag_col, &acc[i][4], vec_out);
    }
}

}  // namespace bankfree
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_bankfree_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::bankfree;
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    const bool vec = fsg::aligned16(g->a, g->lda) && fsg::aligned16(g->b, g->ldb);
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        if (vec) bankfree_sgemm_kernel<I, kA, kB, true><<<grid, kThreads, 0, stream>>>(*g);
        else bankfree_sgemm_kernel<I, kA, kB, false><<<grid, kThreads, 0, stream>>>(*g);
    });
}
#endif

#endif /* FASTSGEMM_LADDER_08_BANKFREE */
