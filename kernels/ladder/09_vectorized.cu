/*
 * Rung 9, vectorized: the tiles loaded four floats a load (LDG.E.128).
 *
 * Rung 8 wrote D in fours; here the tiles come in fours too, where A and B
 * allow it (aligned16): the launcher checks them and picks the vector or the
 * scalar instantiation, and a group of four past a matrix's edge still goes
 * element by element. A row-major A arrives four k-values at a time and is
 * scattered into As's columns; a column-major A arrives four rows at a time,
 * already As's layout. Both tiles' loads are issued before either is stored:
 * with A's stores between them, B's loads waited for A's (slower at 4096^3).
 *
 * Tile parameters: as rung 6: 128 x 128 x 8 block tile, 8 x 8 per thread, 256
 * threads; each thread copies exactly one float4 of each tile per step.
 * Limits: m <= 65535 * 128. The transposed stores into As collide in
 * shared-memory banks.
 * Stacks: as rung 1, product by product, one launch each.
 * Next: rung 10 removes the bank conflicts.
 */
#ifndef FASTSGEMM_LADDER_09_VECTORIZED
#define FASTSGEMM_LADDER_09_VECTORIZED

#include "common.cuh"

namespace fsg {
namespace vectorized {

// ---- tile parameters ----
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the thread tiles must cover the block tile exactly");
static_assert(kTM % 4 == 0 && kTN % 4 == 0, "fragments are read as whole float4s");

}  // namespace vectorized

// ---- kernel ----
/* The output tile a block computes, when blocks do not take the tiles in
 * launch order: block `id` (0 .. tiles_m * tiles_n - 1) walks them in groups
 * of `group` tile rows, column by column inside a group (the last group may
 * have fewer rows). */
struct TileCoord {
    int row, col;
};
template <typename Int>
__host__ __device__ inline TileCoord grouped_tile(Int id, Int tiles_m, Int tiles_n, Int group) {
    const Int per_group = group * tiles_n, first = id / per_group * group;
    const Int rows = tiles_m - first < group ? tiles_m - first : group;
    return {(int)(first + id % per_group % rows), (int)(id % per_group / rows)};
}

/* This block's tile: the 2-D launch grid (gridDim.x tiles across, gridDim.y
 * down) numbered row by row, then grouped by kGroupTileRows tile rows. */
constexpr unsigned kGroupTileRows = 16;
__device__ __forceinline__ TileCoord grouped_block_tile() {
    // 32 bits suffice: the extension keeps both M and N within 65535 tiles (each rung's max_dim).
    const unsigned id = blockIdx.y * gridDim.x + blockIdx.x;
    return grouped_tile<unsigned>(id, gridDim.y, gridDim.x, kGroupTileRows);
}

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

namespace vectorized {

template <typename Index, bool A_TRANS, bool B_TRANS, bool VEC>
__global__ void __launch_bounds__(kThreads) vectorized_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ __align__(16) float As[kBK][kBM];  // transposed: As[p][r] = A(row0 + r, k0 + p)
    __shared__ __align__(16) float Bs[kBK][kBN];  // Bs[p][c] = B(k0 + p, col0 + c)
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const TileCoord tile = grouped_block_tile();  // rung 4's order
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    for (Index k0 = 0; k0 < Index(g.k); k0 += kBK) {
        float4 a[Vec4Tile<kBM, kBK, kThreads, A_TRANS>::kPerThread], b[Vec4Tile<kBK, kBN, kThreads, B_TRANS>::kPerThread];
        fetch_tile_vec4<kBM, kBK, kThreads, A_TRANS, VEC, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid, a);
        fetch_tile_vec4<kBK, kBN, kThreads, B_TRANS, VEC, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid, b);
        store_tile_vec4<kBM, kBK, kThreads, A_TRANS>(  // row-major A: transposed on the way in
            a, tid, [&](int r, int p, float4 v) { store4_kmajor<!A_TRANS>(&As[0][0], kBM, p, r, v); });
        store_tile_vec4<kBK, kBN, kThreads, B_TRANS>(
            b, tid, [&](int p, int c, float4 v) { store4_kmajor<B_TRANS>(&Bs[0][0], kBN, p, c, v); });
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int i = 0; i < kTM; i += 4) load4(&As[p][thread_row * kTM + i], &reg_m[i]);
#pragma unroll
            for (int j = 0; j < kTN; j += 4) load4(&Bs[p][thread_col * kTN + j], &reg_n[j]);
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
    const bool vec_out = output_aligned16(g);
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + thread_row * kTM + i;
        if (row >= g.m) break;
#pragma unroll
        for (int j = 0; j < kTN; j += 4) store_d4(g, row, col0 + thread_col * kTN + j, &acc[i][j], vec_out);
    }
}

}  // namespace vectorized
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_vectorized_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    using namespace fsg::vectorized;
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    const bool vec = fsg::aligned16(g->a, g->lda) && fsg::aligned16(g->b, g->ldb);
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        using I = typename decltype(index)::type;
        constexpr bool kA = decltype(a_trans)::value, kB = decltype(b_trans)::value;
        if (vec) vectorized_sgemm_kernel<I, kA, kB, true><<<grid, kThreads, 0, stream>>>(*g);
        else vectorized_sgemm_kernel<I, kA, kB, false><<<grid, kThreads, 0, stream>>>(*g);
    });
}

#endif /* FASTSGEMM_LADDER_09_VECTORIZED */
