/*
 * Rung 16, warptile: block tile, then warp tile, then thread tile.
 *
 * In rung 14 the threads of a warp covered a 16 x 256 strip of the block tile.
 * Here the block tile is divided into warp tiles (WM x WN), and each warp's
 * lanes divide its warp tile among themselves (LANES_M x LANES_N threads), each
 * thread owning TM x TN results as 4 x 4 quarters spaced 4 * LANES apart, so a
 * warp's fragment loads for one k-step are contiguous runs of shared memory and
 * every value loaded serves the squarest region the registers allow: a warp's
 * 64 x 64 tile reads 64 + 64 floats per k-step where rung 14's 16 x 256 strip
 * reads 16 + 256. On the H100 that changes nothing measurable (Nsight Compute,
 * benchmarks/NOTES.md): both count 268M shared-load wavefronts at 4096^3 and
 * take the same time, because the strip's A fragments are broadcasts and
 * shared memory is not the limit there; the FMA issue rate is. The idea pays
 * where shared-memory bandwidth is short (smaller thread tiles, more warps).
 *
 * Other shapes, and a choice between two of them by how their tiles fall on
 * the SMs, are the engine's (kernels/engine/warptile.cu: kernel="warptile:<name>",
 * among which the tuning table behind kernel="auto" chooses).
 *
 * Tile parameters: rung 14's block tile, 128 x 256 x 16, in 2 x 4 warps of
 * 64 x 64, each warp's lanes 4 x 8, 16 x 8 per thread, one block per SM: the
 * most reuse, the fastest per unit of work. Everything else is rung 14: two
 * shared-memory stages, cp.async where layouts agree and the matrix is
 * aligned, register prefetch otherwise, double-buffered fragments, one
 * barrier per k-step, padded rows. Shared memory is dynamic.
 * Limits: m <= 65535 * 128. Short of the FP32 peak, and of cuBLAS (its speed:
 * the table in kernels/ladder/README.md): the FMA pipe is busy 75% of cycles,
 * issue slots 82%, and what is left is the non-FMA instructions and dispatch
 * stalls of the schedule nvcc makes.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 17 leaves FFMA for the tensor cores.
 */
#ifndef FASTSGEMM_LADDER_16_WARPTILE
#define FASTSGEMM_LADDER_16_WARPTILE

#include "common.cuh"

namespace fsg {
namespace warptile {

// ---- tile parameters ----

constexpr int kBM = 128, kBN = 256, kBK = 16;                       // rung 14's block tile
constexpr int kWarpsM = 2, kWarpsN = 4, kLanesM = 4, kLanesN = 8;      // 2 x 4 warps; a warp's lanes 4 x 8
constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;                // warp tile: 64 x 64
constexpr int kTM = kWM / kLanesM, kTN = kWN / kLanesN;                // thread tile: 16 x 8
constexpr int kQM = kTM / 4, kQN = kTN / 4;                            // 4 x 4 quarters per thread
constexpr int kThreads = kWarpsM * kWarpsN * 32;
constexpr int kPad = 4;
constexpr size_t kSmemBytes = 2 * kBK * ((kBM + kPad) + (kBN + kPad)) * sizeof(float);
static_assert(kLanesM * kLanesN == 32, "a warp's 32 lanes tile its warp tile");
// The 64-bit-index instantiations, used only for offsets past 2^31, need more
// registers for addresses: they keep one fragment buffer rather than spill.
template <typename Index>
constexpr int kFragmentBuffers = sizeof(Index) == 4 ? 2 : 1;

}  // namespace warptile

// ---- kernel ----
/* Whether 128-bit accesses work on a matrix: a 16-byte-aligned base and a
 * leading dimension that keeps every row (or column) start 16-byte aligned. */
__host__ __device__ inline bool aligned16(const void *p, int64_t ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }

/* Four floats from 16-byte-aligned shared memory into registers: one LDS.128. */
__device__ __forceinline__ void load4(const float *smem, float *dst) {
    const float4 v = *reinterpret_cast<const float4 *>(smem);
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
}

/* store_d for D(i, j..j+3): one 128-bit store (and 128-bit load of C) when
 * `vec` says D and C allow it and all four columns are inside D; element by
 * element otherwise. */
__device__ __forceinline__ void store_d4(const fsg_gemm &g, int64_t i, int64_t j, const float *acc, bool vec) {
    if (vec && j + 3 < g.n) {
        float4 r = make_float4(g.alpha * acc[0], g.alpha * acc[1], g.alpha * acc[2], g.alpha * acc[3]);
        if (g.c != nullptr) {
            const float4 c = *reinterpret_cast<const float4 *>(g.c + i * g.ldc + j);
            r.x += g.beta * c.x;
            r.y += g.beta * c.y;
            r.z += g.beta * c.z;
            r.w += g.beta * c.w;
        }
        *reinterpret_cast<float4 *>(g.d + i * g.ldd + j) = r;
        return;
    }
    for (int jj = 0; jj < 4; ++jj)
        if (j + jj < g.n) store_d(g, i, j + jj, acc[jj]);
}

/* Whether D (and C, when it is read) take 128-bit stores and loads. */
__device__ __forceinline__ bool output_aligned16(const fsg_gemm &g) {
    return aligned16(g.d, g.ldd) && (g.c == nullptr || aligned16(g.c, g.ldc));
}

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

/* The tile at (row0, col0) copied into shared memory by cp.async, chunk by
 * chunk: dst(r, c) is where the four elements starting at tile element (r, c)
 * go, contiguous in shared memory as they are in global memory: one 16-byte
 * copy a chunk (the matrix is aligned16). Elements past the matrix's edges
 * are not read, and are zero-filled. */
template <int ROWS, int COLS, int THREADS, bool TRANS, typename Index, typename Dst>
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
        const int valid = left >= 4 ? 4 : (left > 0 ? (int)left : 0);
        // With nothing to read, point at the matrix's first element: a valid, aligned address.
        cp_async16(to, valid > 0 ? src : p, valid * 4);
    }
}

/* The two-stage pipeline of rung 12 and the SIMT rungs after it. Shared memory holds two stages of
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
            copy_tile_async<BM, BK, THREADS, A_TRANS, Index>(g.a, g.lda, m, k, row0, k0, tid,
                                                             [&](int r, int p) { return &As[stage][p][r]; });
        else
            fetch_tile_vec4<BM, BK, THREADS, A_TRANS, VEC, Index>(g.a, g.lda, m, k, row0, k0, tid, a_next);
        if constexpr (kAsyncB)
            copy_tile_async<BK, BN, THREADS, B_TRANS, Index>(g.b, g.ldb, k, n, k0, col0, tid,
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

/* The main loop of rungs 14 to 16, with its shared memory double-buffered
 * (rung 12's TwoStageTiles: tile t + 1 is fetched into one stage while the math
 * runs on the other; one barrier per tile) and its fragments in one or two
 * register buffers:
 *   - one: each k-step loads its fragments, then does its FMAs. The wait for
 *     shared memory is not hidden (the 64-bit index instantiations: no registers for two).
 *   - two: the fragments of step p + 1 are loaded into one buffer while the
 *     FMAs of step p use the other. At a tile's last step the next stage is
 *     landed and published (the barrier) and its first fragments loaded
 *     before the last FMAs, so no step waits for shared memory, even with one
 *     block per SM. The barrier still comes after this thread's last read of
 *     the stage the next fetch overwrites: one barrier covers both hazards.
 * load_fragments(stage, p, buf) fills fragment buffer buf from step p of
 * `stage`; multiply(buf) adds the outer product of buffer buf into the
 * accumulators. */
template <int BK, int FRAGMENT_BUFFERS, typename Tiles, typename Index, typename LoadFragments, typename Multiply>
__device__ __forceinline__ void pipelined_k_loop(Tiles &tiles, Index k, LoadFragments &&load_fragments,
                                                 Multiply &&multiply) {
    static_assert(FRAGMENT_BUFFERS == 1 || FRAGMENT_BUFFERS == 2, "one or two fragment buffers");
    static_assert(BK % 2 == 0, "every tile's first step must use fragment buffer 0");
    constexpr bool kTwo = FRAGMENT_BUFFERS == 2;
    const Index steps = (k + BK - 1) / BK;
    if (steps == 0) return;  // k is the same for every thread: all return, none waits at a barrier
    tiles.fetch(0, 0);
    tiles.land(0);
    __syncthreads();
    if constexpr (kTwo) load_fragments(0, 0, 0);
    for (Index t = 0; t < steps; ++t) {
        const int stage = (int)(t & 1);
        if (t + 1 < steps) tiles.fetch((t + 1) * BK, stage ^ 1);  // in flight during this tile's math
#pragma unroll
        for (int p = 0; p < BK; ++p) {
            if constexpr (!kTwo) {
                load_fragments(stage, p, 0);
            } else if (p + 1 < BK) {
                load_fragments(stage, p + 1, (p + 1) % 2);
            } else if (t + 1 < steps) {
                tiles.land(stage ^ 1);
                __syncthreads();
                load_fragments(stage ^ 1, 0, 0);
            }
            multiply(p % FRAGMENT_BUFFERS);
        }
        if constexpr (!kTwo) {
            if (t + 1 < steps) tiles.land(stage ^ 1);
            __syncthreads();  // tile t + 1 published; nobody reads `stage` again before tile t + 2 goes there
        }
    }
}

namespace warptile {

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) warptile_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for the LDS.128 and cp.async
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);  // As[stage][p][r] = A(row0 + r, k0 + p)
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / kWarpsN) * kWM, warp_col = (warp % kWarpsN) * kWN;
    // This thread's rows: frag_row + qm * kWM / kQM + {0..3} for each quarter qm; columns likewise.
    const int frag_row = warp_row + (lane / kLanesN) * 4, frag_col = warp_col + (lane % kLanesN) * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    // Rung 12's stages: fetch() starts the next tiles' journey, land() completes it.
    TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k,
                                                                                         row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[kFragmentBuffers<Index>][kTM], reg_n[kFragmentBuffers<Index>][kTN];
    pipelined_k_loop<kBK, kFragmentBuffers<Index>>(
        tiles, k,
        [&](int stage, int p, int buf) {
#pragma unroll
            for (int q = 0; q < kQM; ++q) load4(&As[stage][p][frag_row + q * (kWM / kQM)], &reg_m[buf][4 * q]);
#pragma unroll
            for (int q = 0; q < kQN; ++q) load4(&Bs[stage][p][frag_col + q * (kWN / kQN)], &reg_n[buf][4 * q]);
        },
        [&](int buf) {
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[buf][i] * reg_n[buf][j];
        });
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + frag_row + (i / 4) * (kWM / kQM) + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQN; ++q) store_d4(g, row, col0 + frag_col + q * (kWN / kQN), &acc[i][4 * q], vec_out);
    }
}

/* The layout/index dispatch, the vector check, the dynamic shared-memory opt-in. */
inline cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM), slice_count(*g));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = vec ? warptile_sgemm_kernel<I, kA, kB, true> : warptile_sgemm_kernel<I, kA, kB, false>;
        launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, *g);
    });
}

}  // namespace warptile
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_warptile_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::warptile::launch(g, stream);
}

#endif /* FASTSGEMM_LADDER_16_WARPTILE */
