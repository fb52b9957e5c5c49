/*
 * engine/tf32x3_128x64.cu: configuration "128x64" of rung 20
 * (kernel="tf32x3:128x64"): rung 20's kernel with 128 x 64 block tiles.
 *
 * Near 1024^3 the lesson's 128 x 128 tiles make 64 blocks for the H100's 132
 * SMs, one block per SM: half the GPU idles. Halving the block's columns
 * doubles the blocks (128 at 1024^3). Two blocks share each packed tile of B,
 * each bringing its own half of the tile's rows. The pack pass, the split, the
 * consumers and the order of the sums are the lesson's, so are the numbers.
 * Measured: 1.63x torch.matmul at 1024^3, against 1.16x for the 128 x 128
 * tiles (benchmarks/NOTES.md).
 *
 * Stacks as the lesson's: every product packed in one pass, the product on grid
 * z; rung 18 (tf32x3_mma) where this path declines, as in the lesson.
 */
#include "engine/tf32x3.cuh"  // the kernel (its BN), launch_on_packed

/* 128 x 64 block tiles: twice the blocks, for problems near 1024^3 whose
 * 128 x 128 tiles leave half the H100's SMs idle. */
extern "C" cudaError_t fsg_tf32x3_128x64_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_128x64_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

extern "C" cudaError_t fsg_tf32x3_128x64_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3::launch<64>, fsg_tf32x3_mma_sgemm);
}
