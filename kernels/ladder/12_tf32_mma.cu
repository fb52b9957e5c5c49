/*
 * Rung 12, tf32_mma: the tensor cores, on operands rounded to TF32.
 *
 * Rungs 1-11 multiply with FFMA, 128 lanes per SM per clock: the H100's FP32
 * peak (66.9 TFLOP/s) is their ceiling and rung 11 already runs at 0.92x
 * cuBLAS. The tensor cores multiply whole tiles per instruction and are many
 * times faster, but they take TF32 operands: FP32's 8-bit exponent with only
 * 10 of its 23 mantissa bits. Each product is exact and the sums are FP32,
 * so the error is the rounding of the inputs: about 2^-11 relative per
 * operand, a relative error near 3e-4 in D whatever K is (cuBLAS's TF32 mode
 * makes the same trade). Rung 13 buys FP32 accuracy back.
 *
 * What changed from rung 11: each warp's 64 x 64 tile is now 4 x 8 mma.sync
 * m16n8k8 tiles (the fragment layout is below); a k-step of 8 loads 32 floats
 * per lane from shared memory, rounds them to TF32 (cvt.rna) and issues 32
 * MMAs. The tensor cores eat tiles far faster than FFMA did, so memory
 * latency matters again: three shared-memory stages fed by cp.async (rung 9's
 * copies; four-byte ones for unaligned matrices, so one pipeline serves every
 * layout), operands kept in their global layout with rows padded so fragment
 * reads are conflict-free.
 *
 * The instruction: mma.sync.m16n8k8 with TF32 inputs and FP32 accumulators
 * (sm_80 and later). One warp multiplies a 16 x 8 tile of A by an 8 x 8 tile
 * of B into a 16 x 8 tile of D. With g = lane / 4 and t = lane % 4, a lane
 * holds:
 *     A: a[0] = A(g, t)   a[1] = A(g + 8, t)   a[2] = A(g, t + 4)   a[3] = A(g + 8, t + 4)
 *     B: b[0] = B(t, g)   b[1] = B(t + 4, g)
 *     D: d[0] = D(g, 2t)  d[1] = D(g, 2t + 1)  d[2] = D(g + 8, 2t)  d[3] = D(g + 8, 2t + 1)
 *
 * Shared memory keeps each operand in its global layout, so every tile
 * arrives by cp.async (16-byte copies for aligned matrices, 4-byte ones
 * otherwise: one pipeline for every layout and alignment, zero-filled past the
 * edges). Rows are padded so that a warp's fragment reads hit 32 different
 * banks: a lane reads element (g, t) of an A tile or (t, g) of a B tile, so
 * where k is the contiguous direction the row length must be 4 mod 8 floats
 * (g * ld + t covers every bank), and where m or n is, 8 mod 16 (t * ld + g
 * does).
 *
 * Tile parameters: 128 x 128 x 32 block tile, 4 warps of 64 x 64, 3 stages
 * (3 x 35 KiB): the largest warp tile gives each fragment the most reuse,
 * 141 TFLOP/s at 4096^3 against 108 for 8 warps of 64 x 32 (the tile-shape
 * sweep in benchmarks/NOTES.md, "Rung 12: tf32_mma").
 * Limits: m <= 65535 * 128, TF32 accuracy (3e-4), sm_80+.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: mma.sync is Ampere's instruction, and at 128 x 128 tiles it also
 * needs more from L2 than a wider tile would (32 FLOP per byte moved);
 * cuBLAS's Hopper kernels (wgmma, bulk copies, larger tiles) reach 400
 * TFLOP/s. Rung 13 first buys FP32 accuracy with this instruction; rung 14
 * takes Hopper's.
 */
#ifndef FASTSGEMM_LADDER_12_TF32_MMA
#define FASTSGEMM_LADDER_12_TF32_MMA

#include "ladder/11_warptile.cu"

namespace fsg {

// ---- tile parameters ----
namespace tensorcore {

/* A ROWS x COLS tile in shared memory, stored as its matrix is in global
 * memory (row-major, or column-major when TRANS), rows padded as the header
 * explains. K_ROWS says whether k runs down the rows (a B tile) or along them
 * (an A tile). */
template <int ROWS, int COLS, bool TRANS, bool K_ROWS>
struct SmemTile {
    static constexpr int kContiguous = TRANS ? ROWS : COLS;
    static constexpr bool kAlongK = TRANS == K_ROWS;  // k is the contiguous direction
    static constexpr int kLd = kContiguous + (kAlongK ? 4 : 8);
    static constexpr int kFloats = (TRANS ? COLS : ROWS) * kLd;
    static_assert(kAlongK ? kLd % 8 == 4 : kLd % 16 == 8, "padding must spread a warp's fragment reads over all banks");
    static_assert(kLd % 4 == 0, "rows must start 16-byte aligned for cp.async");

    __device__ static int offset(int r, int c) { return TRANS ? c * kLd + r : r * kLd + c; }
};

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, int MIN_BLOCKS>
struct MmaTiling {
    static constexpr int kBM = BM, kBN = BN, kBK = BK, kStages = STAGES, kMinBlocks = MIN_BLOCKS;
    static constexpr int kWarpsN = WARPS_N;
    static constexpr int kWM = BM / WARPS_M, kWN = BN / WARPS_N;  // warp tile
    static constexpr int kMT = kWM / 16, kNT = kWN / 8;           // mma tiles per warp
    static constexpr int kThreads = WARPS_M * WARPS_N * 32;
    static_assert(kWM % 16 == 0 && kWN % 8 == 0, "warp tiles are whole 16 x 8 mma tiles");
    static_assert(BK % 8 == 0, "k-steps of 8");
    static_assert(STAGES >= 2, "a pipeline needs two stages at least");

    template <bool A_TRANS, bool B_TRANS>
    static constexpr size_t smem_bytes() {
        return (size_t)STAGES * (SmemTile<BM, BK, A_TRANS, false>::kFloats + SmemTile<BK, BN, B_TRANS, true>::kFloats) *
               sizeof(float);
    }
};

}  // namespace tensorcore

namespace tf32_mma {
using Tiling = tensorcore::MmaTiling<128, 128, 32, 2, 2, 3, 1>;
}  // namespace tf32_mma

// ---- kernel: the mma.sync kernel (tensorcore::mma_sgemm_kernel), then this rung's math for it ----
namespace tensorcore {

/* x rounded to TF32 (10 explicit mantissa bits, FP32's exponent), to nearest
 * with ties away from zero; the low 13 bits of the result are zero. */
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* d = A * B + c on one 16 x 8 x 8 tile (fragments as above). */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

/* g with its A and B pointers hidden from the optimizer, though still known
 * to point to global memory. Seeing this_slice's advance (k0 * ld for a
 * column-major A or a row-major B), nvcc folds it into the kernel's own
 * address arithmetic and needs more registers for it: the 64-bit-index
 * instantiations below, at 246-249 of their 255, spilled. Hidden, they take
 * what they took before split-K was added (within 2). */
__device__ __forceinline__ fsg_gemm opaque_operands(fsg_gemm g) {
    asm("" : "+l"(g.a), "+l"(g.b));
    __builtin_assume(__isGlobal(g.a));
    __builtin_assume(__isGlobal(g.b));
    return g;
}

/* The kernel of this rung and rung 13. Math is the rung's policy:
 *     typename Math::Accumulators acc;        zero-initialised per thread
 *     Math::step(acc, a, b);                  one k-step of 8: a[MT][4], b[NT][2] as raw floats
 *     Math::result(acc, mt, nt, e);           the sum for element e of mma tile (mt, nt)
 */
template <typename Cfg, typename Math, typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) mma_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = opaque_operands(this_slice(problem));  // split-K: this block's K-slice (common.cuh)
    constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kBK = Cfg::kBK, kStages = Cfg::kStages, kThreads = Cfg::kThreads;
    constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT;
    using TileA = SmemTile<kBM, kBK, A_TRANS, false>;
    using TileB = SmemTile<kBK, kBN, B_TRANS, true>;
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for cp.async
    float *const a_stages = reinterpret_cast<float *>(smem);
    float *const b_stages = a_stages + kStages * TileA::kFloats;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, group = lane / 4, quad = lane % 4;
    const int warp_row = (warp / Cfg::kWarpsN) * Cfg::kWM, warp_col = (warp % Cfg::kWarpsN) * Cfg::kWN;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;

    auto fetch = [&](Index k0, int stage) {
        float *as = a_stages + stage * TileA::kFloats, *bs = b_stages + stage * TileB::kFloats;
        copy_tile_async<kBM, kBK, kThreads, A_TRANS, VEC, Index>(g.a, g.lda, m, k, row0, k0, tid, [&](int r, int c) {
            return as + TileA::offset(r, c);
        });
        copy_tile_async<kBK, kBN, kThreads, B_TRANS, VEC, Index>(g.b, g.ldb, k, n, k0, col0, tid, [&](int r, int c) {
            return bs + TileB::offset(r, c);
        });
    };

    typename Math::Accumulators acc{};
    const Index steps = (k + kBK - 1) / kBK;
    // Fill all stages but one; a commit per stage, even an empty one, keeps the group count uniform.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < steps) fetch((Index)s * kBK, s);
        cp_async_commit();
    }
    int stage = 0;  // where tile t lives: t % kStages
    for (Index t = 0; t < steps; ++t) {
        cp_async_wait<kStages - 2>();  // this thread's copies of tile t have landed...
        __syncthreads();               // ...and everyone's; and everyone is done with tile t - 1
        const Index ahead = t + kStages - 1;
        if (ahead < steps) fetch(ahead * kBK, stage == 0 ? kStages - 1 : stage - 1);  // tile t - 1's stage
        cp_async_commit();

        const float *as = a_stages + stage * TileA::kFloats, *bs = b_stages + stage * TileB::kFloats;
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 8) {
            float a[kMT][4], b[kNT][2];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
                const int r = warp_row + mt * 16 + group;
                a[mt][0] = as[TileA::offset(r, kk + quad)];
                a[mt][1] = as[TileA::offset(r + 8, kk + quad)];
                a[mt][2] = as[TileA::offset(r, kk + quad + 4)];
                a[mt][3] = as[TileA::offset(r + 8, kk + quad + 4)];
            }
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
                const int c = warp_col + nt * 8 + group;
                b[nt][0] = bs[TileB::offset(kk + quad, c)];
                b[nt][1] = bs[TileB::offset(kk + quad + 4, c)];
            }
            Math::step(acc, a, b);
        }
        stage = stage == kStages - 1 ? 0 : stage + 1;
    }

#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const Index row = row0 + warp_row + mt * 16 + group + 8 * half;
            if (row >= m) continue;
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const Index col = col0 + warp_col + nt * 8 + 2 * quad + e;
                    if (col < n) store_d(g, row, col, Math::result(acc, mt, nt, 2 * half + e));
                }
        }
}

/* Launches a configuration: the layout/index/alignment dispatch and the
 * dynamic shared-memory opt-in past 48 KiB. */
template <typename Cfg, typename Math>
cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, Cfg::kBN), (unsigned)ceil_div(g->m, Cfg::kBM), slice_count(*g));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        constexpr size_t kSmem = Cfg::template smem_bytes<kA, kB>();
        auto kernel = vec ? mma_sgemm_kernel<Cfg, Math, I, kA, kB, true> : mma_sgemm_kernel<Cfg, Math, I, kA, kB, false>;
        launch_with_smem(kernel, grid, Cfg::kThreads, kSmem, stream, *g);
    });
}

}  // namespace tensorcore

namespace tf32_mma {

using tensorcore::to_tf32;

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

}  // namespace tf32_mma
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_tf32_mma_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::tf32_mma;
    return fsg::tensorcore::launch<Tiling, RoundOnce<Tiling>>(g, stream);
}
#endif

#endif /* FASTSGEMM_LADDER_12_TF32_MMA */
