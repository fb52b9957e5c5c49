/*
 * engine/warptile.cu: rung 11's kernel (warptile) in the engine's other
 * shapes, and the choice between two of them by how their tiles fall on the
 * SMs. The lesson (kernels/ladder/11_warptile.cu) teaches the warp tile with
 * its one shape; these are what the tuning table behind kernel="auto" chooses
 * among, run as kernel="warptile:<name>" (kernels/support/registry.c lists
 * them). Bigger tiles reuse more per load on big problems; smaller ones keep
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
#include "ladder/11_warptile.cu"  // the kernel, its tiling template and launcher, the lesson's shape (kWide)

namespace fsg {
namespace warptile {

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
    // The lesson's shape through the lesson's own launcher: its kernels stay in its object alone.
    if (wide_cost <= (double)ceil_div(square, sms)) return fsg_warptile_sgemm(g, stream);
    return launch<kSquare>(g, stream);
}

}  // namespace warptile
}  // namespace fsg

// ---- launchers ----
extern "C" cudaError_t fsg_warptile_128x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::kSquare>(g, stream);
}

extern "C" cudaError_t fsg_warptile_64x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::WarpTiling<64, 128, 16, 2, 4, 4, 8, 3>>(g, stream);
}

extern "C" cudaError_t fsg_warptile_64x64x16_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch<fsg::warptile::WarpTiling<64, 64, 16, 2, 2, 4, 8, 4>>(g, stream);
}

extern "C" cudaError_t fsg_warptile_waves_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch_by_waves(g, stream);
}
