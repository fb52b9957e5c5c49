/*
 * Rung 11, tf32x3: FP32 accuracy from TF32 tensor cores, by splitting each
 * operand in two and multiplying three times.
 *
 * Rung 10 loses accuracy in one place only: rounding each operand to TF32's
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
 * tensor cores' own accumulation does not round to nearest (the published
 * study of this method, Ootomo and Yokota 2022, measured truncation), and its
 * error grows with K. So the main term hi_a hi_b is computed by the tensor
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
 * What changed from rung 10: the math policy below, and a smaller warp tile
 * (32 x 32 in a 64 x 64 block tile, 4 warps, two blocks per SM): two
 * accumulator sets and the split fragments need about 200 registers per
 * thread even so. The configurations swept gave 41-43 TFLOP/s at 4096^3, this
 * one the most (benchmarks/NOTES.md). Limits: as rung 10; inputs of magnitude above about
 * 3.4e38 * (1 - 2^-12) round to Inf in hi and give Inf, not FP32's value.
 * Next: the split costs 3x the tensor-core work plus the splitting itself;
 * Hopper's wgmma would feed the tensor cores at their full rate.
 */
#include "tensorcore.cuh"

namespace fsg {
namespace tf32x3 {

using tensorcore::split;

using Tiling = tensorcore::MmaTiling<64, 64, 32, 2, 2, 3, 2>;

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
            for (int e = 0; e < 4; ++e) split(a[mt][e], a_hi[mt][e], a_lo[mt][e]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) split(b[nt][e], b_hi[nt][e], b_lo[nt][e]);
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

}  // namespace tf32x3
}  // namespace fsg

extern "C" cudaError_t fsg_tf32x3_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::tensorcore::wgmma_else_mma_sync(g, stream, fsg_tf32x3_sgemm_sm90, fsg_tf32x3_mma_sync_sgemm);
}

/* The mma.sync path on any GPU, Hopper included: its 64 x 64 tiles give
 * medium problems four times the blocks of the wgmma path's 128 x 128. */
extern "C" cudaError_t fsg_tf32x3_mma_sync_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::tensorcore::launch<fsg::tf32x3::Tiling, fsg::tf32x3::SplitThree<fsg::tf32x3::Tiling>>(g, stream);
}

/* The wgmma path with 128 x 64 block tiles (mma.sync where wgmma is not had):
 * twice the blocks of the rung's own 128 x 128, for problems near 1024^3 whose
 * 128 x 128 tiles leave half the H100's SMs idle. */
extern "C" cudaError_t fsg_tf32x3_128x64_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::tensorcore::wgmma_else_mma_sync(g, stream, fsg_tf32x3_128x64_sgemm_sm90, fsg_tf32x3_mma_sync_sgemm);
}

/* The wgmma path without the pack pass (128 x 64 tiles; mma.sync where wgmma
 * is not had): for a small result and a long K, where packing the operands
 * costs more than the product (tf32x3_sm90.cu). */
extern "C" cudaError_t fsg_tf32x3_direct_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::tensorcore::wgmma_else_mma_sync(g, stream, fsg_tf32x3_direct_sgemm_sm90, fsg_tf32x3_mma_sync_sgemm);
}
