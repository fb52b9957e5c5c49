/*
 * Rung 0, cpu: the reference in plain C, cache-blocked, one thread.
 *
 * Not fast and not meant to be: it is the baseline a GPU rung must beat from
 * the host, the rung that runs where no GPU is (CI), and a second, independent
 * implementation of the same contract as the GPU rungs.
 *
 * Blocking: B is packed kBlockK x kBlockN at a time into a contiguous panel
 * (256 KiB: stays in L2 while every row of A streams past it) and A is packed
 * kBlockM x kBlockK (64 KiB). Packing makes the inner loop contiguous whatever
 * the layouts of A and B, so the compiler vectorises it. Sums run over k in
 * order, in float, as the GPU rungs do; alpha and beta are applied once at the
 * end, so NaN and Inf propagate as in any FP32 GEMM.
 *
 * Needs a scratch buffer of m x kBlockN floats; if it cannot be had the
 * launcher returns cudaErrorMemoryAllocation and writes nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "ladder.h"

enum { kBlockM = 64, kBlockN = 256, kBlockK = 256 };

static inline float element_a(const fsg_gemm *g, int64_t i, int64_t p) {
    return g->a_trans ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
}

static inline float element_b(const fsg_gemm *g, int64_t p, int64_t j) {
    return g->b_trans ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
}

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* The whole K of g in one pass (g->k_slice is not looked at). */
static cudaError_t one_pass(const fsg_gemm *g) {
    float *acc = malloc(sizeof(float) * (size_t)g->m * kBlockN);
    float *b_panel = malloc(sizeof(float) * kBlockK * kBlockN);
    float *a_panel = malloc(sizeof(float) * kBlockM * kBlockK);
    cudaError_t status = cudaSuccess;
    if (acc == NULL || b_panel == NULL || a_panel == NULL) {
        status = cudaErrorMemoryAllocation;
        goto exit;
    }

    for (int64_t jc = 0; jc < g->n; jc += kBlockN) {
        const int64_t nc = min64(kBlockN, g->n - jc);
        memset(acc, 0, sizeof(float) * (size_t)g->m * nc);

        for (int64_t pc = 0; pc < g->k; pc += kBlockK) {
            const int64_t kc = min64(kBlockK, g->k - pc);
            for (int64_t p = 0; p < kc; ++p)
                for (int64_t j = 0; j < nc; ++j) b_panel[p * nc + j] = element_b(g, pc + p, jc + j);

            for (int64_t ic = 0; ic < g->m; ic += kBlockM) {
                const int64_t mc = min64(kBlockM, g->m - ic);
                for (int64_t i = 0; i < mc; ++i)
                    for (int64_t p = 0; p < kc; ++p) a_panel[i * kc + p] = element_a(g, ic + i, pc + p);

                for (int64_t i = 0; i < mc; ++i) {
                    float *restrict acc_row = acc + (ic + i) * nc;
                    for (int64_t p = 0; p < kc; ++p) {
                        const float a_ip = a_panel[i * kc + p];
                        const float *restrict b_row = b_panel + p * nc;
                        for (int64_t j = 0; j < nc; ++j) acc_row[j] += a_ip * b_row[j];
                    }
                }
            }
        }

        for (int64_t i = 0; i < g->m; ++i) {
            for (int64_t j = 0; j < nc; ++j) {
                float result = g->alpha * acc[i * nc + j];
                if (g->c != NULL) result += g->beta * g->c[i * g->ldc + jc + j];
                g->d[i * g->ldd + jc + j] = result;
            }
        }
    }

exit:
    free(acc);
    free(b_panel);
    free(a_panel);
    return status;
}

/* Split-K (ladder.h's k_slice): the slices one after another, each a pass of
 * its own over its K range into its own D. */
cudaError_t fsg_cpu_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    (void)stream;  // runs synchronously on the host
    if (g->k_slice <= 0) return one_pass(g);
    const int64_t slices = g->k > g->k_slice ? (g->k + g->k_slice - 1) / g->k_slice : 1;
    for (int64_t z = 0; z < slices; ++z) {
        const int64_t k0 = z * g->k_slice;
        fsg_gemm slice = *g;
        slice.k = min64(g->k_slice, g->k - k0);
        slice.a = g->a + (g->a_trans ? k0 * g->lda : k0);
        slice.b = g->b + (g->b_trans ? k0 : k0 * g->ldb);
        slice.d = g->d + z * g->m * g->ldd;
        const cudaError_t status = one_pass(&slice);
        if (status != cudaSuccess) return status;
    }
    return cudaSuccess;
}
