/* engine/tf32x3_regs.cu: the launchers of kernel="tf32x3_regs" (the kernel: engine/tf32x3_regs.cuh). */
#include "engine/tf32x3_regs.cuh"

extern "C" cudaError_t fsg_tf32x3_regs_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_regs_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

/* A batch: the products on grid z, every product's B packed in one pass (a shared B once). */
extern "C" cudaError_t fsg_tf32x3_regs_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    using fsg::hopper::tf32x3_regs::launch_else_tf32x3;
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, launch_else_tf32x3<fsg::hopper::tf32x3_regs::kStepsAtOnce>,
                                            fsg_tf32x3_mma_sgemm);
}
