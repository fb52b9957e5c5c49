/*
 * Rung 10, tf32: the tensor cores, on operands rounded to TF32.
 *
 * Rungs 1-9 multiply with FFMA, 128 lanes per SM per clock: the H100's FP32
 * peak (66.9 TFLOP/s) is their ceiling and rung 9 already runs at 0.87x
 * cuBLAS. The tensor cores multiply whole tiles per instruction and are many
 * times faster, but they take TF32 operands: FP32's 8-bit exponent with only
 * 10 of its 23 mantissa bits. Each product is exact and the sums are FP32,
 * so the error is the rounding of the inputs: about 2^-11 relative per
 * operand, a relative error near 3e-4 in D whatever K is (cuBLAS's TF32 mode
 * makes the same trade). Rung 11 buys FP32 accuracy back.
 *
 * What changed from rung 9: each warp's 64 x 64 tile is now 4 x 8 mma.sync
 * m16n8k8 tiles (kernels/tensorcore.cuh has the fragment layout); a k-step
 * of 8 loads 32 floats per lane from shared memory, rounds them to TF32
 * (cvt.rna) and issues 32 MMAs. The tensor cores eat tiles far faster than
 * FFMA did, so memory latency matters again: three shared-memory stages fed
 * by cp.async (four-byte copies for unaligned matrices, so one pipeline
 * serves every layout), operands kept in their global layout with rows padded
 * so fragment reads are conflict-free.
 *
 * Tile parameters: 128 x 128 x 32 block tile, 4 warps of 64 x 64, 3 stages
 * (3 x 35 KiB): the largest warp tile gives each fragment the most reuse,
 * 141 TFLOP/s at 4096^3 against 108 for 8 warps of 64 x 32 (the sweep in
 * benchmarks/experiments/tensorcore_configs.cu, benchmarks/NOTES.md). Limits: m <= 65535 * 128, TF32 accuracy (3e-4), sm_80+.
 * Next: this mma.sync path is Ampere's instruction, and at 128 x 128 tiles it
 * also needs more from L2 than a wider tile would (32 FLOP per byte moved);
 * cuBLAS's Hopper kernels (wgmma, bulk copies, larger tiles) reach 400
 * TFLOP/s. On Hopper this launcher takes the wgmma route instead
 * (kernels/tf32_sm90.cu: operands rounded once into a workspace, 128 x 256
 * tiles); the mma.sync path stays as "tf32:mma.sync".
 */
#include "tensorcore.cuh"

namespace fsg {
namespace tf32 {

using tensorcore::to_tf32;

using Tiling = tensorcore::MmaTiling<128, 128, 32, 2, 2, 3, 1>;

/* One product per k-step: round both operands, accumulate in the tensor core. */
template <typename Cfg>
struct RoundOnce {
    static constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT;
    struct Accumulators {
        float d[kMT][kNT][4];
    };

    __device__ static void step(Accumulators &acc, const float (&a)[kMT][4], const float (&b)[kNT][2]) {
        uint32_t a32[kMT][4], b32[kNT][2];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) a32[mt][e] = to_tf32(a[mt][e]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) b32[nt][e] = to_tf32(b[nt][e]);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) tensorcore::mma_tf32(acc.d[mt][nt], a32[mt], b32[nt], acc.d[mt][nt]);
    }

    __device__ static float result(const Accumulators &acc, int mt, int nt, int e) { return acc.d[mt][nt][e]; }
};

}  // namespace tf32
}  // namespace fsg

/* wgmma on Hopper (kernels/tf32_sm90.cu) whenever it can run, mma.sync otherwise. */
extern "C" cudaError_t fsg_tf32_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::tensorcore::wgmma_else_mma_sync(g, stream, fsg_tf32_sgemm_sm90, fsg_tf32_mma_sync_sgemm);
}

/* The mma.sync path on any GPU, Hopper included. */
extern "C" cudaError_t fsg_tf32_mma_sync_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::tensorcore::launch<fsg::tf32::Tiling, fsg::tf32::RoundOnce<fsg::tf32::Tiling>>(g, stream);
}
