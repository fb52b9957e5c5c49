/*
 * engine/simt.cuh: the engine's FP32 SIMT machinery, for its warp-tiled
 * configurations (engine/warptile.cu). The lessons teach these pieces one rung
 * at a time and keep their own copies (rungs 7-16); this copy is the engine's
 * to change for speed, in its own namespace (fsg::engine), so that no
 * definition here can be taken for a lesson's.
 *   - 128-bit loads and stores where a matrix allows them (rungs 8 and 9);
 *   - tiles copied into shared memory four floats at a time, transposed for A,
 *     padded rows (rungs 7 to 10);
 *   - two shared-memory stages filled by cp.async where layouts agree, by a
 *     register prefetch otherwise (rungs 11 and 12);
 *   - the k-loop with double-buffered fragments and one barrier a k-step
 *     (rung 14).
 */
#ifndef FASTSGEMM_ENGINE_SIMT
#define FASTSGEMM_ENGINE_SIMT

#include "common.cuh"

namespace fsg {
namespace engine {

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

/* How a ROWS x COLS tile is shared out in float4 chunks: chunk i of thread
 * tid starts at tile element (r, c) and runs four elements along the matrix's
 * contiguous direction: (r, c..c+3) for a row-major matrix, (r..r+3, c) for a
 * column-major one. Consecutive threads take consecutive chunks, so a warp's
 * accesses coalesce. */
template <int ROWS, int COLS, int THREADS, bool TRANS>
struct Vec4Tile {
    static constexpr int kContiguous = TRANS ? ROWS : COLS;
    static constexpr int kPerThread = ROWS * COLS / 4 / THREADS;
    static_assert(kContiguous % 4 == 0, "the tile's contiguous side must hold whole groups of four floats");
    static_assert((ROWS * COLS / 4) % THREADS == 0,
                  "every thread moves the same number of float4s, so ROWS * COLS / 4 must be a multiple of THREADS");

    __device__ static void chunk(int tid, int i, int &r, int &c) {
        const int e = tid + i * THREADS;
        const int along = (e % (kContiguous / 4)) * 4, across = e / (kContiguous / 4);
        r = TRANS ? along : across;
        c = TRANS ? across : along;
    }
};

/* Reads this thread's chunks of the tile at (row0, col0) of a rows x cols
 * matrix into registers: one 128-bit load per chunk when VEC (aligned16) and
 * all four elements are inside the matrix, element by element with zero fill
 * otherwise (the last, partial chunk of a row, or an unaligned matrix). */
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

/* Hands this thread's fetched chunks to store(r, c, v), which puts the four
 * values where the kernel's shared-memory layout wants them. */
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

/* Four values of a tile into a k-major shared-memory tile (tile[p][x], row
 * length ld): As[p][r] for A, Bs[p][c] for B. The four start at (p, x) and run
 * along x when ALONG_K is false: one 128-bit store (x must be a multiple of 4);
 * they run along p when ALONG_K is true: four scattered stores. A row-major A
 * and a column-major B arrive along k (they are transposed on the way in); a
 * column-major A and a row-major B arrive along x. */
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

/* The main loop of this rung and rung 16, with its shared memory double-buffered
 * (rung 12's TwoStageTiles: tile t + 1 is fetched into one stage while the math
 * runs on the other; one barrier per tile) and its fragments in one or two
 * register buffers:
 *   - one: each k-step loads its fragments, then does its FMAs. The wait for
 *     shared memory is hidden only by the SM's other blocks.
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

}  // namespace engine
}  // namespace fsg

#endif /* FASTSGEMM_ENGINE_SIMT */
