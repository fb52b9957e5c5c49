/* engine/tf32x3_inplace.cu: the launchers of kernel="tf32x3_inplace" (the kernel: engine/tf32x3_inplace.cuh). */
#include "engine/tf32x3_inplace.cuh"

extern "C" cudaError_t fsg_tf32x3_inplace_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_inplace_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

/* A batch: every product's output tiles on one persistent grid, a shared operand read where it lies. */
extern "C" cudaError_t fsg_tf32x3_inplace_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3_inplace::launch_else_direct,
                                            fsg_tf32x3_mma_sgemm);
}
