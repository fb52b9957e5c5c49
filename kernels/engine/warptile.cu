/*
 * engine/warptile.cu: rung 16's kernel (warptile) as a template over its
 * shape (WarpTiling), in the engine's other shapes, and the choice between two
 * of them by how their tiles fall on the SMs. The lesson
 * (kernels/ladder/16_warptile.cu) teaches the warp tile with its one shape, in
 * constants; this is its kernel with the shape a parameter, on the engine's
 * own copy of the SIMT machinery (engine/simt.cuh). These shapes are what the
 * tuning table behind kernel="auto" chooses among, run as
 * kernel="warptile:<name>" (kernels/support/registry.c lists them). Bigger tiles reuse more per load on big problems; smaller ones keep
 * every SM busy on smaller ones:
 *   - 128x128x16: 4 x 2 warps of 32 x 64, 8 x 8 per thread, two blocks per
 *     SM: the same work per SM at a time, in tiles half as big;
 *   - 64x128x16 and 64x64x16: more blocks for smaller problems;
 *   - waves: the lesson's 128 x 256 shape or 128x128x16, whichever falls in
 *     fewer rounds over the SMs, because tiles are paid for whole: on
 *     4095 x 4097, 544 wide tiles make five rounds over 132 SMs where
 *     4096^3's 512 make four; 1,056 square tiles make eight half-size rounds:
 *     square runs there, wide at 4096^3.
 */
#include "engine/simt.cuh"  // the tiles' copies, the two stages, the k-loop, the stores

namespace fsg {
namespace engine {
namespace warptile {

// ---- the shape ----

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

// The lesson's shape: the "waves" choice weighs it against kSquare (below) and runs it through the lesson's
// launcher, whose object holds its kernels.
using kWide = WarpTiling<128, 256, 16, 2, 4, 4, 8, 1>;

template <typename Cfg, typename Index>
constexpr int kMinBlocksFor = sizeof(Index) == 4 ? Cfg::kMinBlocks : 1;  // 64-bit indices need more registers
// Two fragment buffers (rung 14) where one block per SM must hide its own waits
// and the registers allow it; shapes with several blocks per SM, whose other
// blocks fill the gaps, keep one (a second gained nothing there and spilled).
template <typename Cfg, typename Index>
constexpr int kFragmentBuffersFor = sizeof(Index) == 4 && Cfg::kMinBlocks == 1 ? 2 : 1;

// ---- the kernel and its launch ----

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

using kSquare = WarpTiling<128, 128, 16, 4, 2, 4, 8, 2>;
static_assert(kWide::kBM == kSquare::kBM, "launch_by_waves counts both shapes' block rows once");

/* Configuration "waves". A tile's cost is paid per SM in whole tiles: with S
 * SMs an SM runs up to ceil(tiles / S) of them, the last round only partly
 * full. Counted in 128 x 128 tiles of work, wide costs 2 * ceil(wide / S) and
 * square ceil(square / S) (its two blocks per SM share the SM); wide does the
 * same work 3.5% faster (measured at 4096^3 and 8192^3, benchmarks/NOTES.md),
 * so it runs when its cost, less that, is no higher. */
inline cudaError_t launch_by_waves(const fsg_gemm *g, cudaStream_t stream) {
    constexpr double kWideSpeedup = 1.035;
    int sms = 0;
    const cudaError_t err = current_sm_count(&sms);
    if (err != cudaSuccess) return err;
    const int64_t block_rows = ceil_div(g->m, kWide::kBM) * slice_count(*g);  // split-K: each slice's tiles
    const int64_t wide = block_rows * ceil_div(g->n, kWide::kBN), square = block_rows * ceil_div(g->n, kSquare::kBN);
    const double wide_cost = 2.0 * (double)ceil_div(wide, sms) / kWideSpeedup;
    // The lesson's shape through the lesson's own launcher (ladder.h): its kernels stay in its object alone.
    if (wide_cost <= (double)ceil_div(square, sms)) return fsg_warptile_sgemm(g, stream);
    return launch<kSquare>(g, stream);
}

}  // namespace warptile
}  // namespace engine
}  // namespace fsg

// ---- launchers ----
extern "C" cudaError_t fsg_warptile_128x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::engine::warptile::launch<fsg::engine::warptile::kSquare>(g, stream);
}

extern "C" cudaError_t fsg_warptile_64x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::engine::warptile::launch<fsg::engine::warptile::WarpTiling<64, 128, 16, 2, 4, 4, 8, 3>>(g, stream);
}

extern "C" cudaError_t fsg_warptile_64x64x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::engine::warptile::launch<fsg::engine::warptile::WarpTiling<64, 64, 16, 2, 2, 4, 8, 4>>(g, stream);
}

extern "C" cudaError_t fsg_warptile_waves_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::engine::warptile::launch_by_waves(g, stream);
}
