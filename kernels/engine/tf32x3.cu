/* engine/tf32x3.cu: the launchers of kernel="tf32x3" (the kernel: engine/tf32x3.cuh). */
#include "engine/tf32x3.cuh"

/* 128 x 128 block tiles: the rung's own configuration. */
extern "C" cudaError_t fsg_tf32x3_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg_tf32x3_batch_sgemm(g, &fsg::hopper::kOneProduct, stream);
}

/* A batch, in each configuration: the products on grid z, every product's operands packed in one pass. */
extern "C" cudaError_t fsg_tf32x3_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, batch, stream, fsg::hopper::tf32x3::launch<128>, fsg_tf32x3_mma_sgemm);
}
