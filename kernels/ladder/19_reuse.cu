/*
 * Rung 19, reuse: rung 10's kernel with its FFMAs written in the order that
 * lets their operands come from the register reuse cache.
 *
 * Back on the FMA pipe after the tensor-core rungs, with one question: why
 * does cuBLAS FP32 run 8% faster than rung 10 on the same work? Measured on
 * the H200 at 4096^3 (benchmarks/NOTES.md, "Past cuBLAS on the FMA pipe?"):
 * both issue 2.4 G instructions, 88-89% of them FFMA, but cuBLAS issues one in
 * 88% of the scheduler's cycles and rung 10 one in 80%. The difference is
 * stalls, and the largest is "dispatch": a warp whose next FFMA is ready but
 * cannot be sent to the pipe this cycle, 10% of rung 10's stall samples
 * against 5% of cuBLAS's.
 *
 * An FFMA reads three registers (a, b and the accumulator). The register file
 * is banked, and reads that collide in a bank cost the dispatcher a cycle;
 * the operand reuse cache lets an instruction take a value that the
 * instruction before it read in the same operand slot without touching the
 * banks (ptxas marks such operands `.reuse` in the SASS). So the fewer fresh
 * reads per FFMA, the fewer chances to collide. (Which FFMAs stall is not
 * predicted by a simple model of the banks, NOTES; what was measured is that
 * the dispatch stalls fall as reuse rises.) ptxas chooses the registers and
 * schedules the FFMAs, but it starts from the order in the source and keeps
 * much of it. Rung 10 writes the outer product row by row; ptxas turns that
 * into one a held across eight b's, and only 23 of its 2048 FFMAs a tile
 * reuse both a and b. cuBLAS's main loop has 480 of 1024.
 *
 * The idea: write the outer product in 2 x 2 blocks walked in a snake
 * (SnakeOfBlocks, below). Inside a block each FFMA shares an operand with the
 * one before it: (i, j) (i, j+1) share a_i, then (i+1, j+1) shares b_j+1, then
 * (i+1, j) shares a_i+1. Every other pair of rows walks its blocks right to
 * left, so that a pair's first block shares its b's with the last block of
 * the pair before. (From one block to the next within a pair of rows nothing
 * is shared.) ptxas still holds one a across a row's eight b's, but takes the
 * b's in the order this walk gives each row; 202 of the 2048 FFMAs then
 * reuse both operands, and the dispatch stalls fall (NOTES: 10.4% -> 6.8% of
 * samples).
 *
 * Nothing else changes: the same tile, loads, pipeline and epilogue (rung 10's
 * kernel, given this order as its OuterProduct), and the same sums in the same
 * order: each accumulator still adds its k-steps one after another, so the
 * results are rung 10's, bit for bit. Other orders measured worse (NOTES):
 * row pairs or column pairs walked in a snake, and cuBLAS's own walk (quads of
 * rows against pairs of columns), which ptxas does not keep.
 *
 * Tile parameters: rung 10's (128 x 256 x 16, 16 x 8 a thread, one block an SM).
 * Limits: rung 10's. 1.5-1.8% over rung 10 from 4096^3 up (H200, NOTES:
 * 0.942x cuBLAS FP32 at 4096^3 and 0.953x at 8192^3, where rung 10 runs 0.926x
 * and 0.936x in the same run), 2% slower at 4095 x 4097 x 4093: short of
 * cuBLAS. The same order in a kernel with no bounds code reached 0.965-1.00x
 * at 4096^3 and 0.965-0.971x at 8192^3 (benchmarks/harness/simt_variants.cu);
 * what cuBLAS keeps and this rung does not is fewer stalls around each
 * k-tile's loads.
 * Stacks: as rung 1, product by product, one launch each.
 */
#ifndef FASTSGEMM_LADDER_19_REUSE
#define FASTSGEMM_LADDER_19_REUSE

// The kernel this rung reorders. Not the whole ladder so far: rungs 12-18 are tensor-core rungs (some built for
// sm_90a only), and rung 11's shape choice would bring its kernels into this file's object.
#include "ladder/10_regbuffer.cu"

namespace fsg {
namespace reuse {

/* One k-step's outer product in 2 x 2 blocks, each walked (i, j) (i, j+1) (i+1, j+1) (i+1, j), the blocks of
 * every other pair of rows right to left: inside a block, and from one pair of rows to the next, each FFMA reads
 * an operand that the one before it read. */
struct SnakeOfBlocks {
    template <int TM, int TN>
    static __device__ __forceinline__ void add(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
        static_assert(TM % 2 == 0 && TN % 2 == 0, "whole 2 x 2 blocks");
#pragma unroll
        for (int i = 0; i < TM; i += 2)
#pragma unroll
            for (int step = 0; step < TN; step += 2) {
                const int j = (i / 2) % 2 ? TN - 2 - step : step;
                acc[i][j] += a[i] * b[j];
                acc[i][j + 1] += a[i] * b[j + 1];
                acc[i + 1][j + 1] += a[i + 1] * b[j + 1];
                acc[i + 1][j] += a[i + 1] * b[j];
            }
    }
};

}  // namespace reuse
}  // namespace fsg

// ---- launcher (compiled with this file, not where a later rung includes it for its code) ----
#if __INCLUDE_LEVEL__ == 0
extern "C" cudaError_t fsg_reuse_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return fsg::regbuffer::launch<fsg::reuse::SnakeOfBlocks>(g, stream);
}
#endif

#endif /* FASTSGEMM_LADDER_19_REUSE */
