/*
 * ladder.h: the one interface every rung of the fastsgemm ladder implements,
 * and the registry that lists the rungs.
 *
 * Included from C (the extension, the cpu rung) and from CUDA C++ (the GPU
 * rungs), so it uses only C types and C linkage.
 *
 * The problem every launcher solves:
 *
 *     D = alpha * A * B + beta * C
 *
 * A is m x k, B is k x n, C and D are m x n. D is row-major with leading
 * dimension ldd: D(i, j) = d[i * ldd + j]. C has the same layout as D with
 * its own ldc, and is NULL exactly when beta == 0 (C is then never read, the
 * BLAS convention). C may be the same memory as D (in-place, ldc == ldd).
 *
 * A and B are each row-major or column-major, told by a transpose flag:
 *     a_trans == false: A(i, p) = a[i * lda + p]   (row-major, lda >= k)
 *     a_trans == true:  A(i, p) = a[p * lda + i]   (column-major, lda >= m)
 * and likewise for B with (p, j), ldb >= n or ldb >= k. Pointers and leading
 * dimensions carry no alignment promise beyond 4 bytes.
 *
 * The caller guarantees m >= 1 and n >= 1; k may be 0 (D = beta * C). Any
 * other layout (a column-major D, strided or negative-stride views) is turned
 * into this form by the extension before a launcher is called.
 */
#ifndef FASTSGEMM_LADDER_H
#define FASTSGEMM_LADDER_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fsg_gemm {
    int64_t m, n, k;
    float alpha, beta;
    const float *a;
    int64_t lda;
    bool a_trans;
    const float *b;
    int64_t ldb;
    bool b_trans;
    const float *c; /* NULL when beta == 0 */
    int64_t ldc;
    float *d;
    int64_t ldd;
    /* Split-K (csrc/operands.c). 0, the normal case: the whole K in one pass.
     * k_slice > 0: one launch runs ceil(k / k_slice) slices (one if k == 0;
     * grid z on the GPU); slice z computes the product over K range
     * [z * k_slice, min(k, (z + 1) * k_slice)) as above, times alpha plus
     * beta * C, into D + z * m * ldd (so d holds that many m x ldd slices).
     * Each slice sums its range in order in one accumulator, as an unsplit
     * call on that range would. The caller keeps k_slice a multiple of 32
     * (the Hopper paths' k-tiles; otherwise they decline) and the slices
     * <= 65535. The cuBLAS launchers take only 0. Last in the struct, so
     * every initialiser that leaves it out leaves it 0. */
    int64_t k_slice;
} fsg_gemm;

/* A batch (fastsgemm.matmul's stacks of matrices): `count` products of the
 * shape of an fsg_gemm g; product p reads A at g.a + p * step_a, B at g.b +
 * p * step_b and C (when not NULL) at g.c + p * step_c, and writes D at g.d
 * + p * step_d (steps in elements; 0 for an operand the products share). A
 * struct of its own, not fields of fsg_gemm: every kernel takes fsg_gemm by
 * value, and a larger struct changed the SIMT rungs' code (benchmarks/
 * NOTES.md, "Batches"). g.k_slice is 0 in a batch. */
typedef struct fsg_batch {
    int64_t count;
    int64_t step_a, step_b, step_c, step_d;
} fsg_batch;

/* The most products one batched launch takes: grid z's limit. */
enum { kFsgMaxBatch = 65535 };

/* Every rung has one launcher of this shape. It enqueues the work on `stream`
 * (CUDA rungs) or runs it before returning (the cpu rung, which ignores the
 * stream), checks its launch, and returns the first error it met. It never
 * prints, never exits, and keeps no global state beyond per-thread handles
 * (and the wgmma rungs 19 and 20: one memory pool per device for their
 * workspaces, kernels/support/workspace_pool.c). */
typedef cudaError_t (*fsg_launcher)(const fsg_gemm *g, cudaStream_t stream);

/* The launcher of a rung that runs a whole batch (1 <= count <= kFsgMaxBatch)
 * in one launch: the product index on grid z (the wgmma rungs) or cuBLAS's
 * strided-batched call. The wgmma rungs run it product by product on their
 * mma.sync rung where they would decline one product (not compute capability
 * 9.0, no workspace). Rungs without one run a batch product by product
 * (fsg_each_product). */
typedef cudaError_t (*fsg_batch_launcher)(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);

/* Where a rung's operands must live. */
typedef enum fsg_device { FSG_DEVICE_CPU = 0, FSG_DEVICE_CUDA = 1 } fsg_device;

/* How the planner (csrc/operands.c) cuts a K past 4096 into slices that one
 * launch runs side by side (k_slice above), then sums. Left zero: slices of
 * 512, for rungs whose one FP32 accumulator per element loses accuracy as K
 * grows. Set: the rung's sums keep their accuracy at any K (tf32x3 adds each
 * k-step's main term with an FP32 add; tf32 is as accurate as TF32 lets it be
 * anyway), so K is cut only as far as one wave of these blocks fills the GPU:
 * fewer, deeper slices, and less of the workspace to sum.
 * short_slice, an engine configuration's alone: a K of any length, from twice
 * short_slice up, is cut the same way, into slices of at least short_slice
 * (all but the last, which takes what is left).
 * For thin results (a few rows or columns: a small batch through a layer),
 * whose few blocks would otherwise each walk the whole K while most SMs idle. */
typedef struct fsg_fill {
    int tile_m, tile_n; /* the block tile */
    int blocks_per_sm;  /* blocks resident on one SM at a time */
    int short_slice;    /* 0: a K up to 4096 runs whole */
    /* true: K is never cut, whatever the problem's shape. For a launcher that takes any K whole and gains nothing
     * from slices (ozaki: its sums are exact integers, panels of K added in order, and it would run slices one
     * after another anyway), so that a row's result does not depend on how many rows the product has. */
    bool whole_k;
} fsg_fill;

/* Another template configuration of a rung: the same code and idea with other
 * tile sizes, run as kernel="<rung>:<name>". The tuning behind kernel="auto"
 * (python -m fastsgemm.tune) chooses among the rungs and these. */
typedef struct fsg_config {
    const char *name;    /* the block tile M x N x K, or the path it takes */
    const char *shape;   /* one line: what differs from the rung's own configuration */
    fsg_launcher launch;
    int64_t max_dim;     /* largest m and n it accepts */
    fsg_fill fill;       /* how a long K is sliced (above) */
    fsg_batch_launcher launch_batch; /* a batch in one launch (NULL: product by product) */
    /* NULL: the rung's precision. "near-fp32": within the FP32 bound but with an error above cuBLAS SGEMM's
     * (ozaki's seven moduli), which kernel="auto" never runs. */
    const char *precision;
    /* The file that holds its launcher, relative to the repository; NULL: the rung's own (fsg_rung.source). */
    const char *source;
    /* NULL, or why kernel="auto" never runs this configuration though it is FP32-accurate (as fsg_rung's). */
    const char *not_for_auto;
} fsg_config;

typedef struct fsg_rung {
    int number;          /* position on the ladder; -1 for the cuBLAS yardstick */
    const char *name;    /* what users pass as kernel= */
    const char *idea;    /* one line: what this rung adds */
    fsg_device device;
    const char *source;  /* the file that holds it, relative to the repository */
    fsg_launcher launch;
    int64_t max_dim;     /* largest m and n it accepts */
    const char *sass;    /* instructions its idea must compile to (space-separated), checked in CI */
    const char *precision; /* "fp32": FP32-accurate (error like cuBLAS SGEMM's); "tf32": operands rounded to TF32 */
    fsg_fill fill;       /* how a long K is sliced (above); zero for the ladder's SIMT rungs */
    const fsg_config *configs; /* its other configurations (NULL: none) */
    int config_count;
    fsg_batch_launcher launch_batch; /* its own configuration on a batch in one launch (NULL: product by product) */
    /* NULL: kernel="auto" may run it and its configurations (if FP32-accurate). Otherwise why auto does not:
     * its speed depends on the data, which auto, choosing by shape, cannot see (ozaki). */
    const char *not_for_auto;
} fsg_rung;

/* The registry: the only list of rungs (kernels/support/registry.c). */
extern const fsg_rung fsg_rungs[];
extern const int fsg_rung_count;

/* The launchers, one per rung: kernel="<name>" (kernels/ladder/NN_<name>.cu for
 * rungs 1-18; the engine's for rungs 19-24, kernels/engine/<name>.cu; the cpu
 * rung and the cuBLAS yardsticks in kernels/support/). */
cudaError_t fsg_cpu_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_naive_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_coalesced_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_smem_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_grouped_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tile1d_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tile2d_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_transposed_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_widestore_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_vectorized_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_bankfree_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_twostage_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_doublebuffer_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_bigtile_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_regbuffer_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_reuse_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_warptile_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32_mma_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_mma_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_ozaki_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_inplace_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32_tma_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_cublas_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_cublas_tf32_sgemm(const fsg_gemm *g, cudaStream_t stream);

/* The configurations' launchers, in their rungs' files or the engine's (registry.c says what each is and, in
 * fsg_config.source, where it lives). */
cudaError_t fsg_tile2d_walked_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_warptile_128x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_warptile_64x128x16_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_warptile_64x64x16_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_warptile_waves_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_128x64_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_direct_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_4steps_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_direct_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_ozaki_7_sgemm(const fsg_gemm *g, cudaStream_t stream);
/* The lessons of rungs 19-24 (kernels/ladder/NN_<name>.cu), kernel="<name>:lesson". */
cudaError_t fsg_tf32_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_ozaki_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32x3_inplace_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream);
cudaError_t fsg_tf32_tma_lesson_sgemm(const fsg_gemm *g, cudaStream_t stream);

/* The launchers that run a batch in one launch (registry.c names each beside its rung). */
cudaError_t fsg_tf32_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_128x64_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_direct_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_4steps_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_regs_direct_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32x3_inplace_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_tf32_tma_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_cublas_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);
cudaError_t fsg_cublas_tf32_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream);

/* Runs a batch of g's products one after another, each an ordinary call of
 * `launch`, on `stream`: how a rung without a batch launcher takes a batch,
 * and where one must decline. Returns the first error. */
static inline cudaError_t fsg_each_product(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream,
                                           fsg_launcher launch) {
    fsg_gemm one = *g;
    for (int64_t p = 0; p < batch->count; ++p) {
        one.a = g->a + p * batch->step_a;
        one.b = g->b + p * batch->step_b;
        one.c = g->c != NULL ? g->c + p * batch->step_c : NULL;
        one.d = g->d + p * batch->step_d;
        const cudaError_t err = launch(&one, stream);
        if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
}

/* Destroys the calling thread's cuBLAS handle, if it has one (kernels/support/cublas.c). */
void fsg_cublas_release_thread_handle(void);

/* cuBLAS is opened on first use (kernels/support/cublas.c): fsg_cublas_search_dirs names up to 8 directories to
 * look in first (copied; -1 when out of memory), and fsg_cublas_load_failure says why it could not be opened, or
 * is NULL when it was, or has not been tried yet. */
int fsg_cublas_search_dirs(const char *const *dirs, int count);
const char *fsg_cublas_load_failure(void);
/* The path of the cuBLAS in use, opening it first if need be; NULL where it cannot be opened. */
const char *fsg_cublas_library(void);

/* Copies a rows x cols matrix between two strided views on the GPU
 * (strides in elements, any sign). Used to pack odd layouts, to seed D with C
 * and to scatter a temporary result into its final view
 * (kernels/support/strided_copy.cu). */
cudaError_t fsg_copy_matrix_cuda(float *dst, int64_t dst_rs, int64_t dst_cs,
                                 const float *src, int64_t src_rs, int64_t src_cs,
                                 int64_t rows, int64_t cols, cudaStream_t stream);

/* D = alpha * (W_0 + W_1 + ... in that order) + beta * C, where W_s is the dense
 * row-major m x n partial product of K-slice s at w + s * m * n; C may be NULL
 * (beta == 0). For split-K (csrc/operands.c; kernels/support/strided_copy.cu). */
cudaError_t fsg_sum_k_slices_cuda(float *d, int64_t ldd, const float *c, int64_t ldc, float alpha, float beta,
                                  const float *w, int slices, int64_t m, int64_t n, cudaStream_t stream);

/* Fills `count` floats with uniform random values in [-1, 1), deterministic
 * for a seed (kernels/support/fill_random.cu). For benchmarks: never time zeros. */
cudaError_t fsg_fill_uniform_cuda(float *data, int64_t count, uint64_t seed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* FASTSGEMM_LADDER_H */
