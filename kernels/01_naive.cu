/*
 * Rung 1, naive: one thread computes one element of D.
 *
 * Thread (x, y) of the grid owns D(row = x, col = y) and walks the whole k
 * dimension: k loads of A along its row, k loads of B down its column, one
 * fused multiply-add each. Nothing is reused on chip, so every FMA costs two
 * global loads (8 bytes for 2 FLOP), and because threadIdx.x runs over rows,
 * the 32 threads of a warp read 32 different rows of A and write 32 different
 * rows of D: every access of a warp touches 32 separate cache lines. This is
 * the baseline the ladder climbs from (about 1% of cuBLAS on an H100).
 *
 * Tile parameters: 32 x 32 threads per block, the largest square block.
 * Preconditions: none beyond ladder.h; any m, n, k, both layouts of A and B.
 * Limits: n <= 65535 * 32 (the grid's y dimension); the registry says so.
 * Next: rung 2 swaps the roles of x and y so a warp reads and writes
 * consecutive columns (coalescing).
 */
#include "common.cuh"

namespace {

constexpr int kBlockSide = 32;

__global__ void naive_sgemm_kernel(fsg_gemm g) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t col = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= g.m || col >= g.n) return;  // the last block may overhang the matrix

    float acc = 0.0f;
    for (int64_t p = 0; p < g.k; ++p) acc += fsg::load_a(g, row, p) * fsg::load_b(g, p, col);
    fsg::store_d(g, row, col, acc);
}

}  // namespace

extern "C" cudaError_t fsg_naive_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    const dim3 block(kBlockSide, kBlockSide);
    const dim3 grid((unsigned)fsg::ceil_div(g->m, kBlockSide), (unsigned)fsg::ceil_div(g->n, kBlockSide));
    naive_sgemm_kernel<<<grid, block, 0, stream>>>(*g);
    return fsg::launch_status();
}
