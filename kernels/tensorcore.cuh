/*
 * tensorcore.cuh: the machinery the tensor-core rungs (10 tf32, 11 tf32x3)
 * share: block and warp tiling, a multi-stage cp.async pipeline, the mma.sync
 * fragments and the epilogue. What each rung does with a k-step's fragments
 * (round once, or split in two and multiply three times) is its Math policy,
 * in its own file.
 *
 * The instruction: mma.sync.m16n8k8 with TF32 inputs and FP32 accumulators
 * (sm_80 and later). One warp multiplies a 16 x 8 tile of A by an 8 x 8 tile
 * of B into a 16 x 8 tile of D. With g = lane / 4 and t = lane % 4, a lane
 * holds (PTX ISA, "Matrix fragments for mma.m16n8k8", .tf32):
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
 */
#ifndef FASTSGEMM_TENSORCORE_CUH
#define FASTSGEMM_TENSORCORE_CUH

#include "common.cuh"

/* The Hopper (wgmma) paths of rungs 10 and 11, kernels/tf32_sm90.cu and kernels/tf32x3_sm90.cu. */
/* Each sets *launched = false, and launches nothing, when it cannot run (k == 0, no memory for its
 * workspace, a grid past its limit); the rung's mma.sync path then does the work. */
extern "C" cudaError_t fsg_tf32_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream, bool *launched);
extern "C" cudaError_t fsg_tf32x3_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream, bool *launched);
extern "C" cudaError_t fsg_tf32x3_128x64_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream, bool *launched);
extern "C" cudaError_t fsg_tf32x3_direct_sgemm_sm90(const fsg_gemm *g, cudaStream_t stream, bool *launched);

namespace fsg {
namespace tensorcore {

/* The launcher of rungs 10 and 11: the wgmma path (sm90, kernels/tf32_sm90.cu
 * and tf32x3_sm90.cu) on compute capability 9.0, the one its code is built
 * for (sm_90a), unless it declines the call (it leaves *launched false when
 * its workspace or grid cannot be had); the mma.sync path otherwise. The
 * mma.sync path stays reachable on Hopper as the configurations
 * kernel="tf32:mma.sync" and "tf32x3:mma.sync", which the tests run too. */
inline cudaError_t wgmma_else_mma_sync(const fsg_gemm *g, cudaStream_t stream,
                                       cudaError_t (*sm90)(const fsg_gemm *, cudaStream_t, bool *),
                                       cudaError_t (*mma_sync)(const fsg_gemm *, cudaStream_t)) {
    int device, major, minor;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    if (major == 9 && minor == 0) {
        bool launched = false;
        err = sm90(g, stream, &launched);
        if (err != cudaSuccess || launched) return err;
    }
    return mma_sync(g, stream);
}

/* x rounded to TF32 (10 explicit mantissa bits, FP32's exponent), to nearest
 * with ties away from zero; the low 13 bits of the result are zero. */
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* x = hi + lo with both parts TF32 (rung 11 explains the split). */
__device__ __forceinline__ void split(float x, uint32_t &hi, uint32_t &lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

/* The split product's sum: main term plus corrections, except where the main
 * term is Inf or NaN, which is then the answer (rung 11 says why). */
__device__ __forceinline__ float combine(float main, float corrections) {
    return isfinite(main) ? main + corrections : main;
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

/* The kernel both tensor-core rungs run. Math is the rung's policy:
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
}  // namespace fsg

#endif /* FASTSGEMM_TENSORCORE_CUH */
