/*
 * Rung 18, tf32x3_mma: FP32 accuracy from TF32 tensor cores, by splitting each
 * operand in two and multiplying three times.
 *
 * Rung 17 loses accuracy in one place only: rounding each operand to TF32's
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
 * What changed from rung 17: the math policy below, and a smaller warp tile.
 *
 * Tile parameters: 32 x 32 warp tiles in a 64 x 64 block tile, 4 warps, two
 * blocks per SM: two accumulator sets and the split fragments need about 200
 * registers per thread even so. Of the configurations swept at 4096^3 this
 * one was the fastest (benchmarks/NOTES.md).
 * Limits: as rung 17; inputs of magnitude above about 3.4e38 * (1 - 2^-12)
 * round to Inf in hi and give Inf, not FP32's value.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: the split costs 3x the tensor-core work plus the splitting itself;
 * Hopper's wgmma feeds the tensor cores at their full rate (rungs 19, 20).
 */
#ifndef FASTSGEMM_LADDER_18_TF32X3_MMA
#define FASTSGEMM_LADDER_18_TF32X3_MMA

#include "common.cuh"

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

namespace tf32x3_mma {
using Tiling = tensorcore::MmaTiling<64, 64, 32, 2, 2, 3, 2>;

}  // namespace tf32x3_mma

// ---- kernel: the mma.sync kernel (tensorcore::mma_sgemm_kernel, rung 17's), then this rung's math for it ----
/* Whether 128-bit accesses work on a matrix: a 16-byte-aligned base and a
 * leading dimension that keeps every row (or column) start 16-byte aligned. */
__host__ __device__ inline bool aligned16(const void *p, int64_t ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }

/* Chunk i of thread tid in a ROWS x COLS tile: four floats from tile element (r, c) on, along the matrix's
 * contiguous direction. Consecutive threads take consecutive chunks, so a warp's accesses coalesce. */
template <int ROWS, int COLS, int THREADS, bool TRANS>
struct Vec4Tile {
    static constexpr int kContiguous = TRANS ? ROWS : COLS, kPerThread = ROWS * COLS / 4 / THREADS;
    static_assert(kContiguous % 4 == 0 && (ROWS * COLS / 4) % THREADS == 0, "whole chunks, as many for every thread");

    __device__ static void chunk(int tid, int i, int &r, int &c) {
        const int e = tid + i * THREADS;
        const int along = (e % (kContiguous / 4)) * 4, across = e / (kContiguous / 4);
        r = TRANS ? along : across;
        c = TRANS ? across : along;
    }
};

/* This thread's chunks of the tile at (row0, col0) of a rows x cols matrix, into registers: one 128-bit load a
 * chunk where VEC (aligned16) and all four are inside, else element by element, zero past the edges. */
template <int ROWS, int COLS, int THREADS, bool TRANS, bool VEC, typename Index>
__device__ __forceinline__ void fetch_tile_vec4(const float *p, Index ld, Index rows, Index cols, Index row0,
                                                Index col0, int tid,
                                                float4 (&v)[Vec4Tile<ROWS, COLS, THREADS, TRANS>::kPerThread]) {
    using Tile = Vec4Tile<ROWS, COLS, THREADS, TRANS>;
    const Index along_extent = TRANS ? rows : cols, across_extent = TRANS ? cols : rows;
#pragma unroll
    for (int i = 0; i < Tile::kPerThread; ++i) {
        int r, c;
        Tile::chunk(tid, i, r, c);
        const Index g_along = (TRANS ? row0 + r : col0 + c), g_across = (TRANS ? col0 + c : row0 + r);
        const float *src = p + (g_across * ld + g_along);  // at<TRANS>, in along/across terms
        v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (g_across < across_extent) {
            if (VEC && g_along + 3 < along_extent) {
                v[i] = *reinterpret_cast<const float4 *>(src);
            } else {
                if (g_along + 0 < along_extent) v[i].x = src[0];
                if (g_along + 1 < along_extent) v[i].y = src[1];
                if (g_along + 2 < along_extent) v[i].z = src[2];
                if (g_along + 3 < along_extent) v[i].w = src[3];
            }
        }
    }
}

/* Hands this thread's fetched chunks to store(r, c, v), which puts them where the kernel's layout wants them. */
template <int ROWS, int COLS, int THREADS, bool TRANS, typename Store4>
__device__ __forceinline__ void store_tile_vec4(const float4 (&v)[Vec4Tile<ROWS, COLS, THREADS, TRANS>::kPerThread],
                                                int tid, Store4 &&store) {
    using Tile = Vec4Tile<ROWS, COLS, THREADS, TRANS>;
#pragma unroll
    for (int i = 0; i < Tile::kPerThread; ++i) {
        int r, c;
        Tile::chunk(tid, i, r, c);
        store(r, c, v[i]);
    }
}

/* Four values into a k-major shared-memory tile (tile[p][x], rows of ld), from (p, x): along x one 128-bit store
 * (x a multiple of 4); along p (ALONG_K: a row-major A, a column-major B, transposed on the way in) four stores. */
template <bool ALONG_K>
__device__ __forceinline__ void store4_kmajor(float *tile, int ld, int p, int x, float4 v) {
    if constexpr (ALONG_K) {
        tile[(p + 0) * ld + x] = v.x;
        tile[(p + 1) * ld + x] = v.y;
        tile[(p + 2) * ld + x] = v.z;
        tile[(p + 3) * ld + x] = v.w;
    } else {
        *reinterpret_cast<float4 *>(&tile[p * ld + x]) = v;
    }
}

/* cp.async (sm_80+): 16 bytes from global to shared memory without passing
 * through registers; only the first src_bytes are read, the rest of the 16 are
 * zero-filled. Both addresses must be 16-byte aligned. */
__device__ __forceinline__ void cp_async16(float *smem, const float *gmem, int src_bytes) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* cp.async of one float (cp-size 4 allows only the .ca form): for matrices
 * whose rows or columns are not 16-byte aligned. src_bytes is 4 or 0 (zero fill). */
__device__ __forceinline__ void cp_async4(float *smem, const float *gmem, int src_bytes) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}

/* The tile at (row0, col0) copied into shared memory by cp.async, chunk by
 * chunk: dst(r, c) is where the four elements starting at tile element (r, c)
 * go, contiguous in shared memory as they are in global memory. With VEC (an
 * aligned16 matrix) a chunk is one 16-byte copy; otherwise four 4-byte ones.
 * Elements past the matrix's edges are not read, and are zero-filled. */
template <int ROWS, int COLS, int THREADS, bool TRANS, bool VEC, typename Index, typename Dst>
__device__ __forceinline__ void copy_tile_async(const float *p, Index ld, Index rows, Index cols, Index row0,
                                                Index col0, int tid, Dst &&dst) {
    using Tile = Vec4Tile<ROWS, COLS, THREADS, TRANS>;
    const Index along_extent = TRANS ? rows : cols, across_extent = TRANS ? cols : rows;
#pragma unroll
    for (int i = 0; i < Tile::kPerThread; ++i) {
        int r, c;
        Tile::chunk(tid, i, r, c);
        const Index g_along = (TRANS ? row0 + r : col0 + c), g_across = (TRANS ? col0 + c : row0 + r);
        const Index left = g_across < across_extent ? along_extent - g_along : 0;  // valid elements from here
        const float *src = p + (g_across * ld + g_along);
        float *to = dst(r, c);
        if constexpr (VEC) {
            const int valid = left >= 4 ? 4 : (left > 0 ? (int)left : 0);
            // With nothing to read, point at the matrix's first element: a valid, aligned address.
            cp_async16(to, valid > 0 ? src : p, valid * 4);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) cp_async4(to + e, e < left ? src + e : p, e < left ? 4 : 0);
        }
    }
}

/* The two-stage pipeline of this rung and the SIMT rungs after it. Shared memory holds two stages of
 * the k-major tiles As[stage][p][r] (A transposed) and Bs[stage][p][c].
 * fetch(k0, stage) starts bringing the tiles at k0 toward `stage`: by cp.async,
 * straight into shared memory, for an operand whose shared layout is its
 * global layout (a column-major A, a row-major B) when it is 16-byte aligned;
 * by global loads into registers otherwise. land(stage) finishes the job: the
 * registers are stored (transposing as needed) and this thread's copies are
 * waited for. Between the two the caller does its math on the other stage. */
template <int BM, int BN, int BK, int PAD, int THREADS, bool A_TRANS, bool B_TRANS, bool VEC, typename Index>
struct TwoStageTiles {
    using TileA = Vec4Tile<BM, BK, THREADS, A_TRANS>;
    using TileB = Vec4Tile<BK, BN, THREADS, B_TRANS>;
    static constexpr bool kAsyncA = VEC && A_TRANS, kAsyncB = VEC && !B_TRANS;
    static constexpr int kLdA = BM + PAD, kLdB = BN + PAD;

    float (*As)[BK][kLdA];
    float (*Bs)[BK][kLdB];
    const fsg_gemm &g;
    Index m, n, k, row0, col0;
    int tid;
    float4 a_next[TileA::kPerThread], b_next[TileB::kPerThread];

    __device__ __forceinline__ void fetch(Index k0, int stage) {
        if constexpr (kAsyncA)
            copy_tile_async<BM, BK, THREADS, A_TRANS, true, Index>(g.a, g.lda, m, k, row0, k0, tid,
                                                             [&](int r, int p) { return &As[stage][p][r]; });
        else
            fetch_tile_vec4<BM, BK, THREADS, A_TRANS, VEC, Index>(g.a, g.lda, m, k, row0, k0, tid, a_next);
        if constexpr (kAsyncB)
            copy_tile_async<BK, BN, THREADS, B_TRANS, true, Index>(g.b, g.ldb, k, n, k0, col0, tid,
                                                             [&](int p, int c) { return &Bs[stage][p][c]; });
        else
            fetch_tile_vec4<BK, BN, THREADS, B_TRANS, VEC, Index>(g.b, g.ldb, k, n, k0, col0, tid, b_next);
        cp_async_commit();
    }

    __device__ __forceinline__ void land(int stage) {
        if constexpr (!kAsyncA)
            store_tile_vec4<BM, BK, THREADS, A_TRANS>(a_next, tid, [&](int r, int p, float4 v) {
                store4_kmajor<!A_TRANS>(&As[stage][0][0], kLdA, p, r, v);
            });
        if constexpr (!kAsyncB)
            store_tile_vec4<BK, BN, THREADS, B_TRANS>(b_next, tid, [&](int p, int c, float4 v) {
                store4_kmajor<B_TRANS>(&Bs[stage][0][0], kLdB, p, c, v);
            });
        cp_async_wait<0>();
    }
};

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

/* The kernel of rung 17 and this rung. Math is the rung's policy:
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

// ---- launcher ----
extern "C" cudaError_t fsg_tf32x3_mma_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::tf32x3_mma;
    return fsg::tensorcore::launch<Tiling, SplitThree<Tiling>>(g, stream);
}

#endif /* FASTSGEMM_LADDER_18_TF32X3_MMA */
