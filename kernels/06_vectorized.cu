/*
 * Rung 6, vectorized: 128-bit loads and stores everywhere they can be.
 *
 * Two changes from rung 5, both about moving four floats per instruction:
 *   - A is stored transposed in shared memory (As[p][r]), so the TM = 8 values
 *     a thread needs for step p are contiguous: two LDS.128 instead of eight
 *     strided LDS.32. B's fragment was already contiguous: two LDS.128 too.
 *   - Global loads of the tiles are float4 (LDG.E.128), and so are the stores
 *     of D (STG.E.128), when the matrices allow it: a 16-byte-aligned base and
 *     a leading dimension that is a multiple of 4. The launcher checks that and
 *     picks the vector or the scalar instantiation; inside a vector one, the
 *     last, partial group of four of a row still goes element by element, so
 *     any shape stays correct. A row-major A arrives four k-values at a time
 *     and is scattered into As's columns; a column-major A arrives four rows at
 *     a time, which is already As's layout (one STS.128).
 *
 * Both tiles' loads are issued before either is stored to shared memory
 * (fsg::load_tiles_vec4): each load sits in a branch (vector or checked), and
 * A's stores between the two made B's load wait for A's to land: +10% at
 * 4096^3 when this changed.
 *
 * Tile parameters: as rung 5: 128 x 128 x 8 block tile, 8 x 8 per thread, 256
 * threads; each thread copies exactly one float4 of each tile per step.
 * Limits: m <= 65535 * 128. The transposed stores into As and the fragment
 * loads collide in shared-memory banks; nothing overlaps the global loads of
 * the next tile with the math on this one.
 * Next: rung 7 removes the bank conflicts.
 */
#include "common.cuh"

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the thread tiles must cover the block tile exactly");
static_assert(kTM % 4 == 0 && kTN % 4 == 0, "fragments are read as whole float4s");

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads) vectorized_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = fsg::this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ __align__(16) float As[kBK][kBM];  // transposed: As[p][r] = A(row0 + r, k0 + p)
    __shared__ __align__(16) float Bs[kBK][kBN];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const fsg::TileCoord tile = fsg::grouped_block_tile();
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    for (Index k0 = 0; k0 < Index(g.k); k0 += kBK) {
        fsg::load_tiles_vec4<kBM, kBN, kBK, kThreads, A_TRANS, B_TRANS, VEC, Index>(
            g, row0, col0, k0, tid,
            [&](int r, int p, float4 v) {
                fsg::store4_kmajor<!A_TRANS>(&As[0][0], kBM, p, r, v);  // row-major A: transposed on the way in
            },
            [&](int p, int c, float4 v) { fsg::store4_kmajor<B_TRANS>(&Bs[0][0], kBN, p, c, v); });
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int i = 0; i < kTM; i += 4) fsg::load4(&As[p][thread_row * kTM + i], &reg_m[i]);
#pragma unroll
            for (int j = 0; j < kTN; j += 4) fsg::load4(&Bs[p][thread_col * kTN + j], &reg_n[j]);
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
    const bool vec_out = fsg::output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + thread_row * kTM + i;
        if (row >= g.m) break;
#pragma unroll
        for (int j = 0; j < kTN; j += 4) fsg::store_d4(g, row, col0 + thread_col * kTN + j, &acc[i][j], vec_out);
    }
}

}  // namespace

extern "C" cudaError_t fsg_vectorized_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    const bool vec = fsg::aligned16(g->a, g->lda) && fsg::aligned16(g->b, g->ldb);
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        if (vec) vectorized_sgemm_kernel<I, kA, kB, true><<<grid, kThreads, 0, stream>>>(*g);
        else vectorized_sgemm_kernel<I, kA, kB, false><<<grid, kThreads, 0, stream>>>(*g);
    });
}
