/*
 * engine/tile2d_walked.cu: configuration "walked" of rung 6 (kernel="tile2d:walked"): the lesson's kernel
 * (kernels/ladder/06_tile2d.cu) with its tiles loaded through pointers moved on by a tile per step
 * (SlidingTile, below), not by recomputing their indices and bounds: 87 instructions per tile beside the 648 of
 * its 8 k-steps become 62, and the kernel runs 5% faster than the lesson's (benchmarks/NOTES.md). An
 * address-arithmetic trick rather than a step of the ladder: the rungs after 6 load in 128-bit pieces instead.
 * The tile parameters are the lesson's, copied here (the engine's own, in namespace fsg::engine), and rung 4's
 * block order is the engine's (engine/tile_order.cuh): the lesson is whole and includes nothing, and nothing
 * includes it.
 */
#include "common.cuh"
#include "engine/tile_order.cuh"  // rung 4's block order

namespace fsg {
namespace engine {

// ---- the lesson's tile parameters ----
namespace tile2d {
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
// Two blocks per SM with 32-bit indices (128 registers, no spills), one with 64-bit (rung 6's header says why).
template <typename Index>
constexpr int kMinBlocksPerSM = sizeof(Index) == 4 ? 2 : 1;
}  // namespace tile2d

// ---- rung 4's block order (engine/tile_order.cuh) ----
/* This block's tile: the 2-D launch grid numbered row by row, then grouped by kGroupTileRows tile rows. */
constexpr unsigned kGroupTileRows = 16;
__device__ __forceinline__ TileCoord grouped_block_tile() {
    // 32 bits suffice: the extension keeps both M and N within 65535 tiles (the registry's max_dim).
    const unsigned id = blockIdx.y * gridDim.x + blockIdx.x;
    return grouped_tile<unsigned>(id, gridDim.y, gridDim.x, kGroupTileRows);
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
 * tile costs no index products and no full bounds checks: +5% at 4096^3
 * for this rung (benchmarks/NOTES.md; the old smem rung, which used it, gained as much). The loads stay predicated,
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

namespace tile2d {

/* The lesson's kernel, its k loop walking the tiles with SlidingTile. */
template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM<Index>) tile2d_walked_kernel(fsg_gemm problem) {
    const fsg_gemm g = this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kBM][kBK];
    __shared__ float Bs[kBK][kBN];
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const TileCoord tile = grouped_block_tile();  // rung 4's order
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    SlidingTile<kBM, kBK, kThreads, A_TRANS, false, Index> a_tiles(g.a, g.lda, g.m, g.k, row0, 0, tid);
    SlidingTile<kBK, kBN, kThreads, B_TRANS, true, Index> b_tiles(g.b, g.ldb, g.k, g.n, 0, col0, tid);
    for (Index tiles_left = ceil_div(g.k, kBK); tiles_left > 0; --tiles_left) {
        a_tiles.load_next(tid, [&](int r, int c, float v) { As[r][c] = v; });
        b_tiles.load_next(tid, [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();
        // The lesson's outer products, not unrolled over p (unrolled: 174 registers).
#pragma unroll 1
        for (int p = 0; p < kBK; ++p) {
#pragma unroll
            for (int i = 0; i < kTM; ++i) reg_m[i] = As[thread_row * kTM + i][p];
#pragma unroll
            for (int j = 0; j < kTN; ++j) reg_n[j] = Bs[p][thread_col * kTN + j];
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const Index row = row0 + thread_row * kTM + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const Index col = col0 + thread_col * kTN + j;
            if (row < g.m && col < g.n) store_d(g, row, col, acc[i][j]);
        }
    }
}

inline cudaError_t launch_walked(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(g->n, kBN), (unsigned)ceil_div(g->m, kBM), slice_count(*g));
    return for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        tile2d_walked_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value>
            <<<grid, kThreads, 0, stream>>>(*g);
    });
}

}  // namespace tile2d
}  // namespace engine
}  // namespace fsg

// ---- launcher ----
extern "C" cudaError_t fsg_tile2d_walked_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::engine::tile2d::launch_walked(g, stream);
}
