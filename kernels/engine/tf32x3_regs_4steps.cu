/*
 * engine/tf32x3_regs_4steps.cu: configuration "4steps" of rung 21
 * (kernel="tf32x3_regs:4steps"): rung 21's kernel holding A's fragments of
 * all four k-steps of a tile at once.
 *
 * The lesson's consumers split A's fragments two k-steps at a time: 16
 * registers of hi and lo, and a wgmma wait between the two halves of each
 * k-tile, while the other consumer's wgmmas keep the tensor cores busy. Here
 * all four k-steps' fragments (32 registers) are split before the tile's
 * wgmmas: one wait per k-tile, not two, within the 232 registers a thread the
 * block can give. The products, the order of the sums and the split are the
 * lesson's, so are the numbers. Where the tensor copy cannot read A, rung 20
 * runs, and tf32x3_mma where wgmma cannot, as in the lesson.
 */
#include "engine/tf32x3_regs.cuh"  // the kernel (its STEPS_AT_ONCE), launch_else_tf32x3

extern "C" cudaError_t fsg_tf32x3_regs_4steps_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_regs_4steps_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

extern "C" cudaError_t fsg_tf32x3_regs_4steps_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch,
                                                          cudaStream_t stream) {
    using fsg::hopper::tf32x3_regs::launch_else_tf32x3;
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, launch_else_tf32x3<fsg::hopper::tf32x3_regs::kKSteps>,
                                            fsg_tf32x3_mma_sgemm);
}
