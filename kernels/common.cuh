/*
 * common.cuh: helpers shared by the CUDA rungs. Each lives here once.
 */
#ifndef FASTSGEMM_COMMON_CUH
#define FASTSGEMM_COMMON_CUH

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "ladder.h"

namespace fsg {

/* Number of tiles of size `tile` needed to cover `n` elements. */
__host__ __device__ constexpr int64_t ceil_div(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }


/* Offset of element (r, c) of a matrix stored row-major (TRANS == false) or
 * column-major (TRANS == true) with leading dimension ld, in the kernel's
 * index type (see offsets_fit_int32). */
template <bool TRANS, typename Index>
__device__ __forceinline__ Index at(Index r, Index c, Index ld) {
    return TRANS ? c * ld + r : r * ld + c;
}

/* Kernels index with 32-bit integers when every offset they can form fits,
 * and with 64-bit ones otherwise (m * lda may pass 2^31 elements). It matters:
 * nvcc unrolls and schedules 32-bit index loops much better (2x on rung 2,
 * benchmarks/NOTES.md). kIndexMargin covers the rows and columns a tile may
 * overhang past a matrix's edge, whose offsets are formed but never used. */
constexpr int64_t kIndexMargin = 1024;

/* Split-K (ladder.h's k_slice): a block indexes only inside its slice, whose
 * operands and D start at pointers this_slice (below) moves on in 64 bits, so
 * what must fit is the offsets of one slice: K is the longest slice's. */
inline bool offsets_fit_int32(const fsg_gemm &g) {
    const int64_t limit = INT32_MAX;
    const int64_t k = g.k_slice > 0 && g.k_slice < g.k ? g.k_slice : g.k;
    auto fits = [&](int64_t rows, int64_t cols, int64_t ld) {  // a rows x cols matrix's offsets
        return rows + kIndexMargin < limit && cols + kIndexMargin < limit &&
               (rows + kIndexMargin) * ld + cols + kIndexMargin < limit;
    };
    const bool a = g.a_trans ? fits(k, g.m, g.lda) : fits(g.m, k, g.lda);
    const bool b = g.b_trans ? fits(g.n, k, g.ldb) : fits(k, g.n, g.ldb);
    return a && b && fits(g.m, g.n, g.ldd) && (g.c == nullptr || fits(g.m, g.n, g.ldc));
}

/* Split-K in one launch (ladder.h's k_slice): the launcher puts the slices on
 * grid z, and each kernel starts with
 *     const fsg_gemm g = fsg::this_slice(problem);
 * the problem of its block's slice: A and B moved on to the slice's first k,
 * k cut to the slice's length, D moved on to the slice's own m x ldd. With
 * k_slice == 0 there is one slice, blockIdx.z is 0 and g is the problem. */
inline unsigned slice_count(const fsg_gemm &g) {
    return g.k_slice > 0 && g.k > g.k_slice ? (unsigned)ceil_div(g.k, g.k_slice) : 1u;
}

__device__ __forceinline__ fsg_gemm this_slice(const fsg_gemm &problem) {
    fsg_gemm g = problem;
    const int64_t z = blockIdx.z, k0 = z * problem.k_slice;  // pointer arithmetic in 64 bits, before any Index
    g.a += problem.a_trans ? k0 * problem.lda : k0;           // column-major A: k runs down the leading dimension
    g.b += problem.b_trans ? k0 : k0 * problem.ldb;           // row-major B: likewise
    g.k = problem.k_slice > 0 && problem.k - k0 > problem.k_slice ? problem.k_slice : problem.k - k0;
    g.d += z * problem.m * problem.ldd;
    return g;
}

/* A type carried as a value, so a generic lambda can receive it. */
template <typename T>
struct type_tag {
    using type = T;
};

/* The output tile a block computes, when blocks do not take the tiles in
 * launch order: block `id` (0 .. tiles_m * tiles_n - 1) walks them in groups
 * of `group` tile rows, column by column inside a group (the last group may
 * have fewer rows). The blocks resident at one time then work on the row
 * panels of A and the column panels of B of one group, a few MiB that stay in
 * L2, instead of each wave of blocks streaming all of B through it. */
struct TileCoord {
    int row, col;
};
template <typename Int>
__host__ __device__ inline TileCoord grouped_tile(Int id, Int tiles_m, Int tiles_n, Int group) {
    const Int per_group = group * tiles_n, first = id / per_group * group;
    const Int rows = tiles_m - first < group ? tiles_m - first : group;
    return {(int)(first + id % per_group % rows), (int)(id % per_group / rows)};
}

/* The block order of rungs 3 to 7: the 2-D launch grid (gridDim.x tiles
 * across, gridDim.y down) numbered row by row, then grouped by 16 tile rows,
 * the best of 8, 16 and 32 (benchmarks/NOTES.md: +6% smem, +9% tile1d and +3%
 * bankfree at 4096^3, where launch order kept 39% and 75% of smem's and
 * tile1d's L2 hits; neutral for tile2d and vectorized). Rungs 8 and 9 launch
 * in plain order: there grouping measured neutral (their tiles reuse four
 * times more per load), and its arithmetic spilled the 85-register shape. */
constexpr unsigned kGroupTileRows = 16;
__device__ __forceinline__ TileCoord grouped_block_tile() {
    // 32 bits suffice: the extension keeps both M and N within 65535 tiles (each rung's max_dim).
    const unsigned id = blockIdx.y * gridDim.x + blockIdx.x;
    return grouped_tile<unsigned>(id, gridDim.y, gridDim.x, kGroupTileRows);
}

/* The epilogue every rung shares: D(i, j) = alpha * acc + beta * C(i, j).
 * C is only read when beta != 0 (it is NULL otherwise), so NaN in an unused C
 * never leaks into D. The caller checks that (i, j) is inside D. */
__device__ __forceinline__ void store_d(const fsg_gemm &g, int64_t i, int64_t j, float acc) {
    float result = g.alpha * acc;
    if (g.c != nullptr) result += g.beta * g.c[i * g.ldc + j];
    g.d[i * g.ldd + j] = result;
}

/* Calls launch(a_trans, b_trans, index) with the two layout flags as
 * compile-time constants (std::true_type / std::false_type) and the index type
 * as a type_tag (int32_t when offsets_fit_int32, else int64_t), so every kernel
 * is compiled once per combination and its inner loops carry no layout
 * branches. Returns the launch's status: configuration errors only show in
 * cudaGetLastError(). */
template <typename Launch>
cudaError_t for_layouts(const fsg_gemm &g, Launch &&launch) {
    using Col = std::true_type;
    using Row = std::false_type;
    auto with_index = [&](auto a_trans, auto b_trans) {
        if (offsets_fit_int32(g)) launch(a_trans, b_trans, type_tag<int32_t>{});
        else launch(a_trans, b_trans, type_tag<int64_t>{});
    };
    if (g.a_trans) {
        if (g.b_trans) with_index(Col{}, Col{});
        else with_index(Col{}, Row{});
    } else {
        if (g.b_trans) with_index(Row{}, Col{});
        else with_index(Row{}, Row{});
    }
    return cudaGetLastError();
}

/* kernel<<<grid, threads, smem, stream>>>(args...), first raising the kernel's
 * dynamic shared-memory limit when smem passes the 48 KiB default. A failure
 * of either shows in cudaGetLastError(), which for_layouts returns. */
template <typename Kernel, typename... Args>
void launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream, const Args &...args) {
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return;
    kernel<<<grid, threads, smem, stream>>>(args...);
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

/* Cooperative copy of the ROWS x COLS block at (row0, col0) of a rows x cols
 * matrix (stored as TRANS says) into shared memory, through store(r, c, v).
 * Elements past the matrix's edges are stored as 0, so the product loop needs
 * no bounds checks and partial tiles cost nothing extra. Consecutive threads
 * take consecutive addresses in whichever direction the matrix is contiguous,
 * so the warp's reads coalesce for both layouts. */
template <int ROWS, int COLS, int THREADS, bool TRANS, typename Index, typename Store>
__device__ __forceinline__ void load_tile(const float *p, Index ld, Index rows, Index cols, Index row0, Index col0,
                                          int tid, Store &&store) {
    static_assert((ROWS * COLS) % THREADS == 0,
                  "every thread copies the same number of elements, so ROWS * COLS must be a multiple of THREADS");
    constexpr int kContiguous = TRANS ? ROWS : COLS;
#pragma unroll
    for (int i = 0; i < ROWS * COLS / THREADS; ++i) {
        const int e = tid + i * THREADS;
        const int along = e % kContiguous, across = e / kContiguous;
        const int r = TRANS ? along : across, c = TRANS ? across : along;
        const Index gr = row0 + r, gc = col0 + c;
        store(r, c, (gr < rows && gc < cols) ? p[at<TRANS>(gr, gc, ld)] : 0.0f);
    }
}

/* load_tile for the tiles a block reads one after another along k: the A
 * tiles (row0 .. +ROWS, k0 .. +COLS) slide right, the B tiles (k0 .. +ROWS,
 * col0 .. +COLS) slide down (SLIDES_DOWN). The elements each thread copies,
 * and where they go, are load_tile's; the bookkeeping is not. A thread's
 * elements share one place along the matrix's contiguous side and lie
 * kAcrossStep rows (or columns) apart across it, so one pointer, moved on by a
 * tile per load, finds them all; whether each is inside the matrix is one
 * distance to the edge the tiles slide toward, counted down by a tile per
 * load, and one bit per element for the other edge, which never changes. So a
 * tile costs no index products and no full bounds checks: rungs 3 and 5
 * measured +5% at 4096^3 (benchmarks/NOTES.md). The loads stay predicated,
 * not branched around, so a thread's loads of both operands are in flight
 * together before its stores to shared memory wait for them (a branch per
 * tile between checked and unchecked loads serialised them: tile1d lost half
 * its speed). */
template <int ROWS, int COLS, int THREADS, bool TRANS, bool SLIDES_DOWN, typename Index>
class SlidingTile {
    static constexpr int kContiguous = TRANS ? ROWS : COLS;
    static_assert((ROWS * COLS) % THREADS == 0 && THREADS % kContiguous == 0,
                  "every thread copies the same number of elements, all at one place along the contiguous side");
    static constexpr int kPerThread = ROWS * COLS / THREADS;
    static_assert(kPerThread <= 32, "one bit per element in a 32-bit mask");
    static constexpr int kAcrossStep = THREADS / kContiguous;  // between a thread's elements, across the contiguous side
    // Sliding right moves along the contiguous side for a row-major matrix, sliding down for a column-major one.
    static constexpr bool kSlidesAlong = TRANS == SLIDES_DOWN;
    static constexpr int kSlide = SLIDES_DOWN ? ROWS : COLS;

  public:
    __device__ __forceinline__ SlidingTile(const float *p, Index ld, Index rows, Index cols, Index row0, Index col0,
                                           int tid)
        : ld_(ld) {
        const int along = tid % kContiguous, across = tid / kContiguous;
        const Index r = row0 + (TRANS ? along : across), c = col0 + (TRANS ? across : along);
        next_ = p + at<TRANS>(r, c, ld);  // may lie past the matrix, not to be read then (kIndexMargin)
        const Index along_left = TRANS ? rows - r : cols - c, across_left = TRANS ? cols - c : rows - r;
        slide_left_ = kSlidesAlong ? along_left : across_left;
        // Across the slide, an element is inside for every tile or for none: one bit each, decided here.
        fixed_inside_ = 0;
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
            if (kSlidesAlong ? across_left > i * kAcrossStep : along_left > 0) fixed_inside_ |= 1u << i;
    }

    template <typename Store>
    __device__ __forceinline__ void load_next(int tid, Store &&store) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int e = tid + i * THREADS;
            const int along = e % kContiguous, across = e / kContiguous;
            const bool inside = (fixed_inside_ >> i & 1u) && slide_left_ > (kSlidesAlong ? 0 : i * kAcrossStep);
            store(TRANS ? along : across, TRANS ? across : along, inside ? next_[Index(i * kAcrossStep) * ld_] : 0.0f);
        }
        next_ += kSlidesAlong ? Index(kSlide) : kSlide * ld_;
        slide_left_ -= kSlide;
    }

  private:
    const float *next_;  // this thread's first element of the next tile
    Index ld_;
    Index slide_left_;       // from that element to the matrix's edge in the direction of the slide
    unsigned fixed_inside_;  // bit i: element i is inside the matrix across the slide
};

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

/* A's BM x BK tile at (row0, k0) and B's BK x BN tile at (k0, col0), global
 * to shared memory: both fetched into registers (fetch_tile_vec4), then both
 * handed to their store (store_tile_vec4). Fetching branches (one 128-bit
 * load or four checked ones), and a branch's loads must land before stores
 * after it: with A stored between the two fetches, B's loads waited for A's
 * (measured on rungs 6 and 7: benchmarks/NOTES.md). */
template <int BM, int BN, int BK, int THREADS, bool A_TRANS, bool B_TRANS, bool VEC, typename Index,
          typename StoreA, typename StoreB>
__device__ __forceinline__ void load_tiles_vec4(const fsg_gemm &g, Index row0, Index col0, Index k0, int tid,
                                                StoreA &&store_a, StoreB &&store_b) {
    float4 a[Vec4Tile<BM, BK, THREADS, A_TRANS>::kPerThread], b[Vec4Tile<BK, BN, THREADS, B_TRANS>::kPerThread];
    fetch_tile_vec4<BM, BK, THREADS, A_TRANS, VEC, Index>(g.a, g.lda, g.m, g.k, row0, k0, tid, a);
    fetch_tile_vec4<BK, BN, THREADS, B_TRANS, VEC, Index>(g.b, g.ldb, g.k, g.n, k0, col0, tid, b);
    store_tile_vec4<BM, BK, THREADS, A_TRANS>(a, tid, store_a);
    store_tile_vec4<BK, BN, THREADS, B_TRANS>(b, tid, store_b);
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

/* The two-stage pipeline of rungs 8 and 9. Shared memory holds two stages of
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

/* The main loop of rungs 8 and 9, with its shared memory double-buffered
 * (TwoStageTiles, above: tile t + 1 is fetched into one stage while the math
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

}  // namespace fsg

#endif /* FASTSGEMM_COMMON_CUH */
