/*
 * Rung 13, tf32x3_mma: FP32 accuracy from TF32 tensor cores, by splitting each
 * operand in two and multiplying three times.
 *
 * Rung 12 loses accuracy in one place only: rounding each operand to TF32's
 * 11 significant bits. Write x = hi + lo, hi = tf32(x) and lo = tf32(x - hi):
 * x - hi is exact in FP32 and at most 2^-11 |x| (round to nearest), and
 * rounding it to 11 bits leaves an error near 2^-22 |x|; hi + lo carries
 * about 22 bits of x, close to FP32's 24. Then
 *
 *     a * b = hi_a hi_b + hi_a lo_b + lo_a hi_b + lo_a lo_b,
 *
 * and the last term, near 2^-22 |a b|, is dropped: three MMAs instead of
 * one, for an error like FP32's.
 *
 * How the products are summed decides whether that accuracy survives. The
 * tensor cores' own accumulation does not round to nearest (it truncates),
 * and its error grows with K. So the main term hi_a hi_b is computed by the tensor
 * core from a zero accumulator, one k-step of 8 at a time, and added to the
 * running sum with an ordinary FP32 FADD, which rounds to nearest. The two
 * correction terms are 2^11 times smaller; their own accumulator, inside the
 * tensor core, is accurate enough. D = main + corrections at the end.
 *
 * Non-finite values: for x = +-Inf or NaN, x - hi is NaN, and Inf * 0 turns
 * into NaN in a correction term even where the exact product is Inf. The
 * main term alone already has the right Inf or NaN (hi keeps Inf and NaN), so
 * where it is not finite it is the result.
 *
 * What changed from rung 12: the math policy below, and a smaller warp tile.
 *
 * Tile parameters: 32 x 32 warp tiles in a 64 x 64 block tile, 4 warps, two
 * blocks per SM: two accumulator sets and the split fragments need about 200
 * registers per thread even so. The configurations swept gave 41-43 TFLOP/s
 * at 4096^3, this one the most (benchmarks/NOTES.md).
 * Limits: as rung 12; inputs of magnitude above about 3.4e38 * (1 - 2^-12)
 * round to Inf in hi and give Inf, not FP32's value.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: the split costs 3x the tensor-core work plus the splitting itself;
 * Hopper's wgmma feeds the tensor cores at their full rate (rungs 14, 15).
 */
#ifndef FASTSGEMM_LADDER_13_TF32X3_MMA
#define FASTSGEMM_LADDER_13_TF32X3_MMA

#include "ladder/12_tf32_mma.cu"

namespace fsg {
namespace tf32x3_mma {

// ---- tile parameters ----
using Tiling = tensorcore::MmaTiling<64, 64, 32, 2, 2, 3, 2>;

}  // namespace tf32x3_mma

// ---- kernel: rung 12's tensorcore::mma_sgemm_kernel with this math ----
namespace tensorcore {

/* x = hi + lo with both parts TF32 (the header explains the split). */
__device__ __forceinline__ void split(float x, uint32_t &hi, uint32_t &lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

/* The split product's sum: main term plus corrections, except where the main
 * term is Inf or NaN, which is then the answer (the header says why). */
__device__ __forceinline__ float combine(float main, float corrections) {
    return isfinite(main) ? main + corrections : main;
}

}  // namespace tensorcore

namespace tf32x3_mma {

template <typename Cfg>
struct SplitThree {
    static constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT;
    struct Accumulators {
        float main[kMT][kNT][4];  // hi_a hi_b, summed with FP32 FADDs (round to nearest)
        float corr[kMT][kNT][4];  // hi_a lo_b + lo_a hi_b, summed by the tensor core
    };

    __device__ static void step(Accumulators &acc, const float (&a)[kMT][4], const float (&b)[kNT][2]) {
        uint32_t a_hi[kMT][4], a_lo[kMT][4], b_hi[kNT][2], b_lo[kNT][2];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) tensorcore::split(a[mt][e], a_hi[mt][e], a_lo[mt][e]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) tensorcore::split(b[nt][e], b_hi[nt][e], b_lo[nt][e]);
        const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
                float product[4];
                tensorcore::mma_tf32(product, a_hi[mt], b_hi[nt], zero);
#pragma unroll
                for (int e = 0; e < 4; ++e) acc.main[mt][nt][e] += product[e];
                tensorcore::mma_tf32(acc.corr[mt][nt], a_lo[mt], b_hi[nt], acc.corr[mt][nt]);
                tensorcore::mma_tf32(acc.corr[mt][nt], a_hi[mt], b_lo[nt], acc.corr[mt][nt]);
            }
    }

    __device__ static float result(const Accumulators &acc, int mt, int nt, int e) {
        return tensorcore::combine(acc.main[mt][nt][e], acc.corr[mt][nt][e]);
    }
};

}  // namespace tf32x3_mma
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_tf32x3_mma_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::tf32x3_mma;
    return fsg::tensorcore::launch<Tiling, SplitThree<Tiling>>(g, stream);
}
#endif

#endif /* FASTSGEMM_LADDER_13_TF32X3_MMA */
