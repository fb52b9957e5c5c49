/* engine/tf32.cu: the launchers of kernel="tf32" (the kernel: engine/tf32.cuh). */
#include "engine/tf32.cuh"

extern "C" cudaError_t fsg_tf32_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

/* A batch: the products on grid z, every product's operands packed in one pass. */
extern "C" cudaError_t fsg_tf32_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32::launch, fsg_tf32_mma_sgemm);
}
