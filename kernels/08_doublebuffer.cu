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
 *     behind the tile's math (2,048 FMAs per thread).
 *
 * The fragments are double-buffered too, in registers: the LDS.128 loads of
 * k-step p + 1 are issued before the FMAs of step p, and at a tile's last step
 * the next stage is published and its first fragments loaded before the last
 * FMAs (fsg::pipelined_k_loop). No step waits for shared memory.
 *
 * That is what pays for the bigger thread tile. Overlap within a block lets one
 * block per SM (8 warps) keep the FMA pipe fed, where rung 7 needed a second
 * block to fill its gaps; so each thread can hold 16 x 8 results (128
 * registers of accumulators, up to 255 registers per thread) instead of 8 x 8,
 * and 128 of its 134 instructions per k-step are FMAs instead of 64 of 68.
 * Measured on the H100 (benchmarks/NOTES.md, experiments/warptile_pingpong.cu):
 * double-buffered fragments gain nothing at 8 x 8 with two blocks per SM, and
 * 16 x 8 at one block per SM gains nothing without them; together, +7%.
 *
 * Tile parameters: a 128 x 256 x 16 block tile and 256 threads, 8 rows of 32.
 * A thread's 16 rows are four groups of 4, a quarter of the tile (32 rows)
 * apart; its 8 columns two groups of 4, half the tile (128 columns) apart. A
 * warp is one row of threads: its A fragments are one broadcast, its B
 * fragments 512 contiguous bytes, and no bank is asked twice (rung 7's rule).
 * BK = 16: the profile showed the FMA pipe starved by the instructions around
 * it, not by memory; a deeper k-step halves the fetches, barriers and loop
 * trips per FMA (+11% measured). Rows padded by 4 floats as in rung 7. Two
 * stages of 16 x (132 + 260) floats: 49 KiB, past the 48 KiB static limit, so
 * shared memory is dynamic.
 * Limits: m <= 65535 * 128. Big tiles are paid for whole: 4095 x 4097 makes
 * 544 of them, five rounds over 132 SMs where 4096^3 makes four (-23%), and
 * 1000^3 makes 32, leaving 100 SMs idle. Each warp reads fragments for a
 * 16 x 256 strip of the block tile.
 * Next: rung 9 tiles at the warp level and picks its tile to fit the waves.
 */
#include "common.cuh"

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 16, kTM = 16, kTN = 8;
constexpr int kThreadCols = kBN / kTN, kThreads = (kBM / kTM) * kThreadCols;
constexpr int kQuartersM = kTM / 4, kQuartersN = kTN / 4;  // 4 x 4 groups per thread, spread over the tile
constexpr int kPad = 4;
constexpr size_t kSmemBytes = 2 * kBK * ((kBM + kPad) + (kBN + kPad)) * sizeof(float);
// The 64-bit-index instantiations, used only for offsets past 2^31, need more
// registers for addresses: they keep one fragment buffer rather than spill.
template <typename Index>
constexpr int kFragmentBuffers = sizeof(Index) == 4 ? 2 : 1;

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) doublebuffer_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = fsg::this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for the LDS.128 and cp.async
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);  // As[stage][p][r] = A(row0 + r, k0 + p)
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x;
    const int frag_row = (tid / kThreadCols) * 4, frag_col = (tid % kThreadCols) * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    // The pipeline (common.cuh): fetch() starts the next tiles' journey, land() completes it.
    fsg::TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k,
                                                                                         row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[kFragmentBuffers<Index>][kTM], reg_n[kFragmentBuffers<Index>][kTN];
    fsg::pipelined_k_loop<kBK, kFragmentBuffers<Index>>(
        tiles, k,
        [&](int stage, int p, int buf) {
#pragma unroll
            for (int q = 0; q < kQuartersM; ++q) fsg::load4(&As[stage][p][q * (kBM / kQuartersM) + frag_row], &reg_m[buf][4 * q]);
#pragma unroll
            for (int q = 0; q < kQuartersN; ++q) fsg::load4(&Bs[stage][p][q * (kBN / kQuartersN) + frag_col], &reg_n[buf][4 * q]);
        },
        [&](int buf) {
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[buf][i] * reg_n[buf][j];
        });
    const bool vec_out = fsg::output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + (i / 4) * (kBM / kQuartersM) + frag_row + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQuartersN; ++q)
            fsg::store_d4(g, row, col0 + q * (kBN / kQuartersN) + frag_col, &acc[i][4 * q], vec_out);
    }
}

}  // namespace

extern "C" cudaError_t fsg_doublebuffer_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    const bool vec = fsg::aligned16(g->a, g->lda) && fsg::aligned16(g->b, g->ldb);
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = vec ? doublebuffer_sgemm_kernel<I, kA, kB, true> : doublebuffer_sgemm_kernel<I, kA, kB, false>;
        fsg::launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, *g);
    });
}
