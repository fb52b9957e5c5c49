/*
 * Rung 11, warptile: block tile, then warp tile, then thread tile.
 *
 * In rung 10 the threads of a warp covered a 16 x 256 strip of the block tile.
 * Here the block tile is divided into warp tiles (WM x WN), and each warp's
 * lanes divide its warp tile among themselves (LANES_M x LANES_N threads), each
 * thread owning TM x TN results as 4 x 4 quarters spaced 4 * LANES apart, so a
 * warp's fragment loads for one k-step are contiguous runs of shared memory and
 * every value loaded serves the squarest region the registers allow: a warp's
 * 64 x 64 tile reads 64 + 64 floats per k-step where rung 10's 16 x 256 strip
 * reads 16 + 256. On the H100 that changes nothing measurable (Nsight Compute,
 * benchmarks/NOTES.md): both count 268M shared-load wavefronts at 4096^3 and
 * take the same time, because the strip's A fragments are broadcasts and
 * shared memory is not the limit there; the FMA issue rate is. The idea pays
 * where shared-memory bandwidth is short (smaller thread tiles, more warps).
 *
 * The shape is a template configuration (WarpTiling). The rung's own is
 * rung 10's block tile: 128 x 256 x 16, 2 x 4 warps of 64 x 64, 16 x 8 per
 * thread, one block per SM: the most reuse, the fastest per unit of work.
 * Other shapes, and a choice between two of them by how their tiles fall on
 * the SMs, are the engine's (kernels/engine/warptile.cu: kernel="warptile:<name>",
 * among which the tuning table behind kernel="auto" chooses).
 *
 * Tile parameters: the shape above. Everything else is rung 10: two shared-memory stages, cp.async where layouts
 * agree and the matrix is aligned, register prefetch otherwise, double-buffered
 * fragments in the shapes with one block per SM, one barrier per k-step,
 * padded rows. Shared memory is dynamic.
 * Limits: m <= 65535 * BM. 71-72% of the FP32 peak (cuBLAS: 77%): the FMA
 * pipe is busy 75% of cycles, issue slots 82%, and what is left is the
 * non-FMA instructions and dispatch stalls of the schedule nvcc makes.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 12 leaves FFMA for the tensor cores.
 */
#ifndef FASTSGEMM_LADDER_11_WARPTILE
#define FASTSGEMM_LADDER_11_WARPTILE

#include "ladder/10_regbuffer.cu"

namespace fsg {
namespace warptile {

// ---- tile parameters ----

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int LANES_M, int LANES_N, int MIN_BLOCKS>
struct WarpTiling {
    static constexpr int kBM = BM, kBN = BN, kBK = BK;
    static constexpr int kWarpsM = WARPS_M, kWarpsN = WARPS_N, kLanesM = LANES_M, kLanesN = LANES_N;
    static constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;  // warp tile
    static constexpr int kTM = kWM / kLanesM, kTN = kWN / kLanesN;  // thread tile
    static constexpr int kQM = kTM / 4, kQN = kTN / 4;              // 4 x 4 quarters per thread
    static constexpr int kThreads = kWarpsM * kWarpsN * 32;
    static constexpr int kMinBlocks = MIN_BLOCKS;
    static constexpr int kPad = 4;  // floats per shared-memory row: breaks the transposed stores' bank conflicts
    static constexpr int kStageFloats = kBK * ((kBM + kPad) + (kBN + kPad));
    static constexpr size_t kSmemBytes = 2 * kStageFloats * sizeof(float);

    static_assert(kLanesM * kLanesN == 32, "a warp's 32 lanes tile its warp tile");
    static_assert(kBM % kWarpsM == 0 && kBN % kWarpsN == 0, "warp tiles must cover the block tile exactly");
    static_assert(kWM % (4 * kLanesM) == 0 && kWN % (4 * kLanesN) == 0,
                  "each thread's tile must be whole 4 x 4 quarters");
    static_assert(kBK % 4 == 0, "tiles move in float4s along k");
};

// The rung's shape (the measurements behind it: benchmarks/NOTES.md, results/raw/).
using kWide = WarpTiling<128, 256, 16, 2, 4, 4, 8, 1>;

template <typename Cfg, typename Index>
constexpr int kMinBlocksFor = sizeof(Index) == 4 ? Cfg::kMinBlocks : 1;  // 64-bit indices need more registers
// Two fragment buffers (rung 10) where one block per SM must hide its own waits
// and the registers allow it; shapes with several blocks per SM, whose other
// blocks fill the gaps, keep one (a second gained nothing there and spilled).
template <typename Cfg, typename Index>
constexpr int kFragmentBuffersFor = sizeof(Index) == 4 && Cfg::kMinBlocks == 1 ? 2 : 1;

// ---- kernel ----
template <typename Cfg, typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(Cfg::kThreads, (kMinBlocksFor<Cfg, Index>)) warptile_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kBK = Cfg::kBK, kPad = Cfg::kPad, kThreads = Cfg::kThreads;
    constexpr int kWM = Cfg::kWM, kWN = Cfg::kWN, kQM = Cfg::kQM, kQN = Cfg::kQN;
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for the LDS.128 and cp.async
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);  // As[stage][p][r] = A(row0 + r, k0 + p)
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / Cfg::kWarpsN) * kWM, warp_col = (warp % Cfg::kWarpsN) * kWN;
    // This thread's rows: frag_row + qm * kWM / kQM + {0..3} for each quarter qm; columns likewise.
    const int frag_row = warp_row + (lane / Cfg::kLanesN) * 4, frag_col = warp_col + (lane % Cfg::kLanesN) * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k, row0, col0, tid};

    float acc[Cfg::kTM][Cfg::kTN] = {};
    constexpr int kBuffers = kFragmentBuffersFor<Cfg, Index>;
    float reg_m[kBuffers][Cfg::kTM], reg_n[kBuffers][Cfg::kTN];
    pipelined_k_loop<kBK, kBuffers>(
        tiles, k,
        [&](int stage, int p, int buf) {
#pragma unroll
            for (int q = 0; q < kQM; ++q) load4(&As[stage][p][frag_row + q * (kWM / kQM)], &reg_m[buf][4 * q]);
#pragma unroll
            for (int q = 0; q < kQN; ++q) load4(&Bs[stage][p][frag_col + q * (kWN / kQN)], &reg_n[buf][4 * q]);
        },
        [&](int buf) {
#pragma unroll
            for (int i = 0; i < Cfg::kTM; ++i)
#pragma unroll
                for (int j = 0; j < Cfg::kTN; ++j) acc[i][j] += reg_m[buf][i] * reg_n[buf][j];
        });
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < Cfg::kTM; ++i) {
        const Index row = row0 + frag_row + (i / 4) * (kWM / kQM) + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQN; ++q) store_d4(g, row, col0 + frag_col + q * (kWN / kQN), &acc[i][4 * q], vec_out);
    }
}

/* Launches one configuration: the layout/index dispatch, the vector check, and
 * the dynamic shared-memory opt-in past 48 KiB. */
template <typename Cfg>
cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, Cfg::kBN), (unsigned)ceil_div(g->m, Cfg::kBM), slice_count(*g));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = vec ? warptile_sgemm_kernel<Cfg, I, kA, kB, true> : warptile_sgemm_kernel<Cfg, I, kA, kB, false>;
        launch_with_smem(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, *g);
    });
}

}  // namespace warptile
}  // namespace fsg

// ---- launchers (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_warptile_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::kWide>(g, stream);
}
#endif

#endif /* FASTSGEMM_LADDER_11_WARPTILE */
