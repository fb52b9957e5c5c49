/*
 * Rung 9, warptile: block tile, then warp tile, then thread tile.
 *
 * In rung 8 the threads of a warp covered a 16 x 128 strip of the block tile.
 * Here the block tile is divided into warp tiles (WM x WN), and each warp's
 * lanes divide its warp tile among themselves (LANES_M x LANES_N threads), each
 * thread owning TM x TN results as 4 x 4 quarters spaced 4 * LANES apart, so a
 * warp's fragment loads for one k-step are contiguous runs of shared memory and
 * every value loaded serves the squarest region the registers allow. The shape
 * is a template configuration (WarpTiling): the launcher uses kDefault, chosen
 * by measurement (benchmarks/NOTES.md), and three more are built for the
 * tuning table behind kernel="auto" (python -m fastsgemm.tune).
 *
 * Everything else is rung 8: two shared-memory stages, cp.async where layouts
 * agree and the matrix is aligned, register prefetch otherwise, one barrier per
 * k-step, padded rows. Shared memory is dynamic, so tiles may pass 48 KiB.
 * Limits: m <= 65535 * BM.
 */
#include "common.cuh"

namespace fsg {
namespace warptile {

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

// 128 x 128 x 16 block tile, 4 x 2 warps of 32 x 64, 4 x 8 lanes of 8 x 8, two blocks per SM: the
// fastest shape that stays fast on odd sizes in the sweep (benchmarks/NOTES.md, results/raw/).
using kDefault = WarpTiling<128, 128, 16, 4, 2, 4, 8, 2>;

template <typename Cfg, typename Index>
constexpr int kMinBlocksFor = sizeof(Index) == 4 ? Cfg::kMinBlocks : 1;  // 64-bit indices need more registers

template <typename Cfg, typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(Cfg::kThreads, (kMinBlocksFor<Cfg, Index>)) warptile_sgemm_kernel(fsg_gemm g) {
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
    float reg_m[Cfg::kTM], reg_n[Cfg::kTN];
    const Index steps = (k + kBK - 1) / kBK;
    if (steps > 0) {
        tiles.fetch(0, 0);
        tiles.land(0);
    }
    __syncthreads();
    for (Index t = 0; t < steps; ++t) {
        const int stage = (int)(t & 1);
        if (t + 1 < steps) tiles.fetch((t + 1) * kBK, stage ^ 1);
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int q = 0; q < kQM; ++q) load4(&As[stage][p][frag_row + q * (kWM / kQM)], &reg_m[4 * q]);
#pragma unroll
            for (int q = 0; q < kQN; ++q) load4(&Bs[stage][p][frag_col + q * (kWN / kQN)], &reg_n[4 * q]);
#pragma unroll
            for (int i = 0; i < Cfg::kTM; ++i)
#pragma unroll
                for (int j = 0; j < Cfg::kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        if (t + 1 < steps) tiles.land(stage ^ 1);
        __syncthreads();
    }
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
    const dim3 grid((unsigned)ceil_div(g->n, Cfg::kBN), (unsigned)ceil_div(g->m, Cfg::kBM));
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

extern "C" cudaError_t fsg_warptile_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::kDefault>(g, stream);
}

/* Other configurations, for kernel="warptile:<name>" and the tuning behind
 * kernel="auto" (kernels/registry.c lists them). Bigger tiles reuse more per
 * load on big problems; smaller ones keep every SM busy on smaller ones. */
extern "C" cudaError_t fsg_warptile_128x256x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::WarpTiling<128, 256, 16, 2, 4, 4, 8, 1>>(g, stream);
}

extern "C" cudaError_t fsg_warptile_64x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::WarpTiling<64, 128, 16, 2, 4, 4, 8, 3>>(g, stream);
}

extern "C" cudaError_t fsg_warptile_64x64x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::WarpTiling<64, 64, 16, 2, 2, 4, 8, 4>>(g, stream);
}
