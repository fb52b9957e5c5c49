/*
 * Rung 13, bigtile: a 16 x 8 tile a thread, one block an SM, and k-steps
 * twice as deep.
 *
 * Rung 12's thread computes 8 x 8 results (64 of its 68 instructions a k-step
 * are FMAs) and two blocks share an SM. Here a thread holds 16 x 8 results
 * (128 accumulators, up to 255 registers), 128 of 134 instructions a k-step
 * are FMAs, and the block tile grows to 128 x 256, one block an SM. BK doubles
 * to 16: the FMA pipe was starved by the instructions around it, not by memory,
 * and a deeper k-step halves the fetches, barriers and loop trips per FMA.
 * On the H200 it is faster than rung 12 at 4096^3 and 8192^3 (measured:
 * benchmarks/NOTES.md, "The SIMT ladder split"), though with one block an SM
 * nothing hides the wait for each k-step's fragments. Rung 14 hides it.
 *
 * Tile parameters: a 128 x 256 x 16 block tile and 256 threads, 8 rows of 32.
 * A thread's 16 rows are four groups of 4, a quarter of the tile (32 rows)
 * apart; its 8 columns two groups of 4, half the tile (128 columns) apart. A
 * warp is one row of threads: its A fragments are one broadcast, its B
 * fragments 512 contiguous bytes, and no bank is asked twice (rung 10's rule).
 * Rows padded by 4 floats as in rung 10 (at BK = 16 a row-major A's and a
 * column-major B's scattered stores still meet 2-way conflicts). Two stages
 * of 16 x (132 + 260) floats: 49 KiB, past the 48 KiB static limit, so
 * shared memory is dynamic.
 * Blocks launch in plain order: rung 4's grouping measured neutral here (the
 * tiles are twice rung 12's), and its arithmetic spilled.
 * Limits: m <= 65535 * 128. Big tiles are paid for whole: 4095 x 4097 makes
 * 544 of them, five rounds over 132 SMs where 4096^3 makes four, and 1000^3
 * makes 32, leaving 100 SMs idle. The fragment loads of a k-step wait for
 * shared memory just before its FMAs, and no other block hides that.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 14 double-buffers the fragments in registers.
 */
#ifndef FASTSGEMM_LADDER_13_BIGTILE
#define FASTSGEMM_LADDER_13_BIGTILE

#include "common.cuh"

namespace fsg {
namespace bigtile {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 256, kBK = 16, kTM = 16, kTN = 8;
constexpr int kThreadCols = kBN / kTN, kThreads = (kBM / kTM) * kThreadCols;
constexpr int kQuartersM = kTM / 4, kQuartersN = kTN / 4;  // 4 x 4 groups per thread, spread over the tile
constexpr int kPad = 4;
constexpr size_t kSmemBytes = 2 * kBK * ((kBM + kPad) + (kBN + kPad)) * sizeof(float);

}  // namespace bigtile

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

namespace bigtile {

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) bigtile_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    extern __shared__ float4 smem[];  // float4: 16-byte alignment for the LDS.128 and cp.async
    auto As = reinterpret_cast<float(*)[kBK][kBM + kPad]>(smem);  // As[stage][p][r] = A(row0 + r, k0 + p)
    auto Bs = reinterpret_cast<float(*)[kBK][kBN + kPad]>(reinterpret_cast<float *>(smem) + 2 * kBK * (kBM + kPad));
    const int tid = threadIdx.x;
    const int frag_row = (tid / kThreadCols) * 4, frag_col = (tid % kThreadCols) * 4;
    const Index row0 = (Index)blockIdx.y * kBM, col0 = (Index)blockIdx.x * kBN;
    const Index m = g.m, n = g.n, k = g.k;
    // Rung 12's stages: fetch() starts the next tiles' journey, land() completes it.
    TwoStageTiles<kBM, kBN, kBK, kPad, kThreads, A_TRANS, B_TRANS, VEC, Index> tiles{As, Bs, g, m, n, k,
                                                                                         row0, col0, tid};

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    const Index steps = ceil_div(k, kBK);
    if (steps > 0) {  // k is the same for every thread: all fetch, or none waits at the barrier
        tiles.fetch(0, 0);
        tiles.land(0);
        __syncthreads();
    }
    for (Index t = 0; t < steps; ++t) {
        const int stage = (int)(t & 1);
        if (t + 1 < steps) tiles.fetch((t + 1) * kBK, stage ^ 1);  // in flight during this tile's math
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int q = 0; q < kQuartersM; ++q) load4(&As[stage][p][q * (kBM / kQuartersM) + frag_row], &reg_m[4 * q]);
#pragma unroll
            for (int q = 0; q < kQuartersN; ++q) load4(&Bs[stage][p][q * (kBN / kQuartersN) + frag_col], &reg_n[4 * q]);
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        if (t + 1 < steps) tiles.land(stage ^ 1);  // registers stored, this thread's copies waited for
        __syncthreads();  // tile t + 1 published; nobody reads `stage` again before tile t + 2 goes there
    }
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + (i / 4) * (kBM / kQuartersM) + frag_row + i % 4;
        if (row >= m) continue;
#pragma unroll
        for (int q = 0; q < kQuartersN; ++q)
            store_d4(g, row, col0 + q * (kBN / kQuartersN) + frag_col, &acc[i][4 * q], vec_out);
    }
}

/* The layout/index dispatch, the vector check, the dynamic shared-memory opt-in. */
inline cudaError_t launch(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM), slice_count(*g));
    const bool vec = aligned16(g->a, g->lda) && aligned16(g->b, g->ldb);
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        auto kernel = vec ? bigtile_sgemm_kernel<I, kA, kB, true> : bigtile_sgemm_kernel<I, kA, kB, false>;
        launch_with_smem(kernel, grid, kThreads, kSmemBytes, stream, *g);
    });
}

}  // namespace bigtile
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_bigtile_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::bigtile::launch(g, stream);
}

#endif /* FASTSGEMM_LADDER_13_BIGTILE */
