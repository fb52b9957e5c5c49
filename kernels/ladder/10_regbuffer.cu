/*
 * Rung 10, regbuffer: fragments double-buffered in registers, so that one
 * block per SM hides its own waits and its threads can hold twice the results.
 *
 * In rung 9 each k-step loaded its fragments from shared memory and then did
 * its FMAs: the wait for the LDS.128s was hidden only by the SM's other block.
 * Here the fragments of k-step p + 1 are loaded into one register buffer while
 * the FMAs of step p use the other, and at a tile's last step the next stage
 * is landed and published and its first fragments loaded before the last FMAs
 * (pipelined_k_loop, below). No step waits for shared memory. The shared-memory
 * stages are rung 9's (TwoStageTiles).
 *
 * That is what pays for the bigger thread tile. Overlap within a block lets one
 * block per SM (8 warps) keep the FMA pipe fed, where rung 9 needed a second
 * block to fill its gaps; so each thread can hold 16 x 8 results (128
 * registers of accumulators, up to 255 registers per thread) instead of 8 x 8,
 * and 128 of its 134 instructions per k-step are FMAs instead of 64 of 68.
 * Measured on the H100 (benchmarks/NOTES.md, "Rung 10: regbuffer"):
 * double-buffered fragments gain nothing at 8 x 8 with two blocks per SM, and
 * 16 x 8 at one block per SM gains nothing without them; together, +7%.
 *
 * Tile parameters: a 128 x 256 x 16 block tile and 256 threads, 8 rows of 32.
 * A thread's 16 rows are four groups of 4, a quarter of the tile (32 rows)
 * apart; its 8 columns two groups of 4, half the tile (128 columns) apart. A
 * warp is one row of threads: its A fragments are one broadcast, its B
 * fragments 512 contiguous bytes, and no bank is asked twice (rung 8's rule).
 * BK = 16: the profile showed the FMA pipe starved by the instructions around
 * it, not by memory; a deeper k-step halves the fetches, barriers and loop
 * trips per FMA (+11% measured). Rows padded by 4 floats as in rung 8. Two
 * stages of 16 x (132 + 260) floats: 49 KiB, past the 48 KiB static limit, so
 * shared memory is dynamic.
 * Blocks launch in plain order: rung 4's grouping measured neutral here (the
 * tiles reuse four times more per load), and its arithmetic spilled.
 * Limits: m <= 65535 * 128. Big tiles are paid for whole: 4095 x 4097 makes
 * 544 of them, five rounds over 132 SMs where 4096^3 makes four (-23%), and
 * 1000^3 makes 32, leaving 100 SMs idle. Each warp reads fragments for a
 * 16 x 256 strip of the block tile.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 11 tiles at the warp level.
 */
#ifndef FASTSGEMM_LADDER_10_REGBUFFER
#define FASTSGEMM_LADDER_10_REGBUFFER

#include "ladder/09_doublebuffer.cu"

namespace fsg {
namespace regbuffer {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 256, kBK = 16, kTM = 16, kTN = 8;
constexpr int kThreadCols = kBN / kTN, kThreads = (kBM / kTM) * kThreadCols;
constexpr int kQuartersM = kTM / 4, kQuartersN = kTN / 4;  // 4 x 4 groups per thread, spread over the tile
constexpr int kPad = 4;
constexpr size_t kSmemBytes = 2 * kBK * ((kBM + kPad) + (kBN + kPad)) * sizeof(float);
// The 64-bit-index instantiations, used only for offsets past 2^31, need more
// registers for addresses: they keep one fragment buffer rather than spill.
template <typename Index>
constexpr int kFragmentBuffers = sizeof(Index) == 4 ? 2 : 1;

}  // namespace regbuffer

// ---- kernel ----
/* The main loop of this rung and rung 11, with its shared memory double-buffered
 * (rung 9's TwoStageTiles: tile t + 1 is fetched into one stage while the math
 * runs on the other; one barrier per tile) and its fragments in one or two
 * register buffers:
 *   - one: each k-step loads its fragments, then does its FMAs. The wait for
 *     shared memory is hidden only by the SM's other blocks.
 *   - two: the fragments of step p + 1 are loaded into one buffer while the
 *     FMAs of step p use the other. At a tile's last step the next stage is
 *     landed and published (the barrier) and its first fragments loaded
 *     before the last FMAs, so no step waits for shared memory, even with one
 *     block per SM. The barrier still comes after this thread's last read of
 *     the stage the next fetch overwrites: one barrier covers both hazards.
 * load_fragments(stage, p, buf) fills fragment buffer buf from step p of
 * `stage`; multiply(buf) adds the outer product of buffer buf into the
 * accumulators. */
template <int BK, int FRAGMENT_BUFFERS, typename Tiles, typename Index, typename LoadFragments, typename Multiply>
__device__ __forceinline__ void pipelined_k_loop(Tiles &tiles, Index k, LoadFragments &&load_fragments,
                                                 Multiply &&multiply) {
    static_assert(FRAGMENT_BUFFERS == 1 || FRAGMENT_BUFFERS == 2, "one or two fragment buffers");
    static_assert(BK % 2 == 0, "every tile's first step must use fragment buffer 0");
    constexpr bool kTwo = FRAGMENT_BUFFERS == 2;
    const Index steps = (k + BK - 1) / BK;
    if (steps == 0) return;  // k is the same for every thread: all return, none waits at a barrier
    tiles.fetch(0, 0);
    tiles.land(0);
    __syncthreads();
    if constexpr (kTwo) load_fragments(0, 0, 0);
    for (Index t = 0; t < steps; ++t) {
        const int stage = (int)(t & 1);
        if (t + 1 < steps) tiles.fetch((t + 1) * BK, stage ^ 1);  // in flight during this tile's math
#pragma unroll
        for (int p = 0; p < BK; ++p) {
            if constexpr (!kTwo) {
                load_fragments(stage, p, 0);
            } else if (p + 1 < BK) {
                load_fragments(stage, p + 1, (p + 1) % 2);
            } else if (t + 1 < steps) {
                tiles.land(stage ^ 1);
                __syncthreads();
                load_fragments(stage ^ 1, 0, 0);
            }
            multiply(p % FRAGMENT_BUFFERS);
        }
        if constexpr (!kTwo) {
            if (t + 1 < steps) tiles.land(stage ^ 1);
            __syncthreads();  // tile t + 1 published; nobody reads `stage` again before tile t + 2 goes there
        }
    }
}

namespace regbuffer {

/* One k-step's outer product added into the accumulators, row by row as written here; ptxas schedules the
 * FFMAs from this order. Rung 19 runs this kernel with the same products in another order (OuterProduct). */
struct RowByRow {
    template <int TM, int TN>
    static __device__ __forceinline__ void add(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
};

template <typename OuterProduct, typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) regbuffer_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for the LDS.128 and cp.async
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);  // As[stage][p][r] = A(row0 + r, k0 + p)
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x;
    const int frag_row = (tid / kThreadCols) * 4, frag_col = (tid % kThreadCols) * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    // Rung 9's stages: fetch() starts the next tiles' journey, land() completes it.
    TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k,
                                                                                         row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[kFragmentBuffers<Index>][kTM], reg_n[kFragmentBuffers<Index>][kTN];
    pipelined_k_loop<kBK, kFragmentBuffers<Index>>(
        tiles, k,
        [&](int stage, int p, int buf) {
#pragma unroll
            for (int q = 0; q < kQuartersM; ++q) load4(&As[stage][p][q * (kBM / kQuartersM) + frag_row], &reg_m[buf][4 * q]);
#pragma unroll
            for (int q = 0; q < kQuartersN; ++q) load4(&Bs[stage][p][q * (kBN / kQuartersN) + frag_col], &reg_n[buf][4 * q]);
        },
        [&](int buf) { OuterProduct::add(acc, reg_m[buf], reg_n[buf]); });
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + (i / 4) * (kBM / kQuartersM) + frag_row + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQuartersN; ++q)
            store_d4(g, row, col0 + q * (kBN / kQuartersN) + frag_col, &acc[i][4 * q], vec_out);
    }
}

/* Launches the kernel with the given outer-product order: the layout/index dispatch, the vector check, the
 * dynamic shared-memory opt-in. */
template <typename OuterProduct>
cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM), slice_count(*g));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = vec ? regbuffer_sgemm_kernel<OuterProduct, I, kA, kB, true>
                          : regbuffer_sgemm_kernel<OuterProduct, I, kA, kB, false>;
        launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, *g);
    });
}

}  // namespace regbuffer
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_regbuffer_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::regbuffer::launch<fsg::regbuffer::RowByRow>(g, stream);
}
#endif

#endif /* FASTSGEMM_LADDER_10_REGBUFFER */
