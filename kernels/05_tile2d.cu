/*
 * Rung 5, tile2d: each thread computes a TM x TN tile of D as a sum of outer
 * products of register fragments.
 *
 * Rung 4 reused a B value across one column of TM results. Here each thread
 * owns an 8 x 8 tile: per p it loads TM = 8 values of A and TN = 8 values of
 * B from shared memory into registers (16 loads) and does 8 * 8 = 64 FMAs
 * with them, the outer product. Four FMAs per shared load instead of about one,
 * and 64 independent accumulators keep the FMA pipes busy.
 *
 * Tile parameters: a 128 x 128 tile of D per block, BK = 8, 8 x 8 per thread:
 * (128 / 8) * (128 / 8) = 256 threads, 64 accumulators each, capped at 128
 * registers so that two blocks fit on an SM. Each thread
 * copies 4 elements of the 128 x 8 A tile and 4 of the 8 x 128 B tile per step,
 * through pointers moved on by a tile per step (fsg::SlidingTile, as rung 3):
 * recomputing their indices and bounds took 87 instructions per tile beside
 * the 648 of its 8 k-steps; this takes 62, and is 5% faster.
 * Limits: m <= 65535 * 128. Global loads are 32-bit; the fragment loads from
 * As[row][p] walk down a column of a row-major tile: scalar, strided.
 * Next: rung 6 stores A transposed in shared memory and moves everything in
 * 128-bit pieces.
 */
#include "common.cuh"

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the thread tiles must cover the block tile exactly");

// Two blocks per SM: left to itself the compiler takes 174 registers, which
// fits one 256-thread block per SM (8 warps: too few to hide latency). Capped
// at 128 it needs no spills and two blocks fit (measured: see benchmarks/NOTES.md).
constexpr int kMinBlocksPerSM = 2;

template <typename Index, bool A_TRANS, bool B_TRANS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM) tile2d_sgemm_kernel(fsg_gemm problem) {
    const fsg_gemm g = fsg::this_slice(problem);  // split-K: this block's K-slice (common.cuh)
    __shared__ float As[kBM][kBK];
    __shared__ float Bs[kBK][kBN];
    const int tid = threadIdx.x;
    const int thread_col = tid % (kBN / kTN), thread_row = tid / (kBN / kTN);
    const fsg::TileCoord tile = fsg::grouped_block_tile();
    const Index row0 = (Index)tile.row * kBM, col0 = (Index)tile.col * kBN;

    float acc[kTM][kTN] = {};
    float reg_m[kTM], reg_n[kTN];
    fsg::SlidingTile<kBM, kBK, kThreads, A_TRANS, false, Index> a_tiles(g.a, g.lda, g.m, g.k, row0, 0, tid);
    fsg::SlidingTile<kBK, kBN, kThreads, B_TRANS, true, Index> b_tiles(g.b, g.ldb, g.k, g.n, 0, col0, tid);
    for (Index tiles_left = fsg::ceil_div(g.k, kBK); tiles_left > 0; --tiles_left) {
        a_tiles.load_next(tid, [&](int r, int c, float v) { As[r][c] = v; });
        b_tiles.load_next(tid, [&](int r, int c, float v) { Bs[r][c] = v; });
        __syncthreads();
        // Not unrolled over p: unrolled, the compiler fetches all BK values of each
        // A row at once (As[row][0..7] is contiguous) and needs 174 registers.
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
            if (row < g.m && col < g.n) fsg::store_d(g, row, col, acc[i][j]);
        }
    }
}

}  // namespace

extern "C" cudaError_t fsg_tile2d_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 grid((unsigned)fsg::ceil_div(g->n, kBN), (unsigned)fsg::ceil_div(g->m, kBM), fsg::slice_count(*g));
    return fsg::for_layouts(*g, [&](auto a_trans, auto b_trans, auto index) {
        tile2d_sgemm_kernel<typename decltype(index)::type, decltype(a_trans)::value, decltype(b_trans)::value><<<grid, kThreads, 0, stream>>>(*g);
    });
}
