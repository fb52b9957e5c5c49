/*
 * Rung 8, doublebuffer: the loads of tile k+1 overlap the math on tile k.
 *
 * Up to rung 7 each step of the k loop was: load a tile, barrier, compute,
 * barrier. While a block loaded, its FMA units waited (only the SM's other
 * block could fill the gap). Here shared memory holds two stages. In step t the
 * block computes on stage t % 2 while tile t + 1 is already on its way into the
 * other stage, and one barrier per step (not two) both publishes tile t + 1 and
 * frees stage t % 2 for tile t + 2. The tile comes in by one of two routes:
 *
 *   - cp.async (sm_80+) when the operand's shared layout is its global layout
 *     (a row-major B, a column-major A) and it is 16-byte aligned: the copy
 *     engine writes shared memory directly, no registers, no instructions
 *     waiting on the data. Chunks past the matrix's edges are zero-filled by the
 *     copy itself (the src-size operand).
 *   - register prefetch otherwise (a row-major A, which is transposed into As,
 *     or an unaligned matrix): the global loads are issued before the math and
 *     their registers written to shared memory after it, so their latency hides
 *     behind 64 FMAs per thread per k.
 *
 * Tile parameters: as rung 7 (128 x 128 block tile, two 4 x 4 quarters per
 * thread, padded rows, 256 threads) but BK = 16: the profile showed the FMA
 * pipe starved by the instructions around it, not by memory, and a deeper
 * k-step halves the fetches, barriers and loop trips per FMA (+11% measured,
 * benchmarks/NOTES.md). Two stages: 2 x 16.5 KiB of shared memory.
 * __launch_bounds__ keeps two blocks per SM (at most 128 registers).
 * Limits: m <= 65535 * 128. Each warp still reads fragments for a 16 x 128
 * strip of the block tile, and the block tile's shape is fixed.
 * Next: rung 9 tiles at the warp level.
 */
#include "common.cuh"

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 16, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
constexpr int kPad = 4;
// Two blocks per SM (at most 128 registers). The 64-bit-index instantiations,
// used only for offsets past 2^31, need a few more registers: they get one.
template <typename Index>
constexpr int kMinBlocksPerSM = sizeof(Index) == 4 ? 2 : 1;
static_assert(kTM == 8 && kTN == 8, "a thread's tile is two 4 x 4 quarters, half a block tile apart");

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM<Index>) doublebuffer_sgemm_kernel(fsg_gemm g) {
    __shared__ __align__(16) float As[2][kBK][kBM + kPad];  // As[stage][p][r] = A(row0 + r, k0 + p)
    __shared__ __align__(16) float Bs[2][kBK][kBN + kPad];  // Bs[stage][p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const int frag_row = thread_row * 4, frag_col = thread_col * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    // The pipeline (common.cuh): fetch() starts the next tiles' journey, land() completes it.
    fsg::TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k,
                                                                                         row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    const Index steps = (k + kBK - 1) / kBK;
    if (steps > 0) {
        tiles.fetch(0, 0);
        tiles.land(0);
    }
    __syncthreads();
    for (Index t = 0; t < steps; ++t) {
        const int stage = (int)(t & 1);
        if (t + 1 < steps) tiles.fetch((t + 1) * kBK, stage ^ 1);  // in flight during the math below
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
            fsg::load4(&As[stage][p][frag_row], &reg_m[0]);
            fsg::load4(&As[stage][p][kBM / 2 + frag_row], &reg_m[4]);
            fsg::load4(&Bs[stage][p][frag_col], &reg_n[0]);
            fsg::load4(&Bs[stage][p][kBN / 2 + frag_col], &reg_n[4]);
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        if (t + 1 < steps) tiles.land(stage ^ 1);
        // Tile t + 1 is complete for everyone, and nobody reads stage `stage` again
        // before tile t + 2 is fetched into it.
        __syncthreads();
    }
    const bool vec_out = fsg::output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + (i < 4 ? frag_row + i : kBM / 2 + frag_row + i - 4);
        if (row >= m) continue;
        fsg::store_d4(g, row, col0 + frag_col, &acc[i][0], vec_out);
        fsg::store_d4(g, row, col0 + kBN / 2 + frag_col, &acc[i][4], vec_out);
    }
}

}  // namespace

extern "C" cudaError_t fsg_doublebuffer_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM));
    const bool vec = fsg::aligned16(g->a, g->lda) && fsg::aligned16(g->b, g->ldb);
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        if (vec) doublebuffer_sgemm_kernel<I, kA, kB, true><<<grid, kThreads, 0, stream>>>(*g);
        else doublebuffer_sgemm_kernel<I, kA, kB, false><<<grid, kThreads, 0, stream>>>(*g);
    });
}
