/*
 * engine/ozaki_7.cu: configuration "7" of rung 17 (kernel="ozaki:7"): the
 * lesson's scheme with seven moduli, not eight.
 *
 * Each modulus is one INT8 product of the residues; seven carry 8 bits fewer
 * of the scaled operands between them than eight, for an eighth less work.
 * The error is then up to 5.6x cuBLAS FP32's (benchmarks/NOTES.md), within
 * the FP32 bound but above cuBLAS's, so the registry marks it "near-fp32" and
 * kernel="auto" never runs it. tf32x3 runs where this path cannot, as in the
 * lesson.
 */
#include "ladder/17_ozaki.cu"  // the scheme (its moduli count), the fallback's launcher

extern "C" cudaError_t fsg_ozaki_7_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::hopper::wgmma_else_mma_sync(g, &fsg::hopper::kOneProduct, stream, fsg::hopper::ozaki::launch<7>,
                                            fsg_tf32x3_sgemm);
}
