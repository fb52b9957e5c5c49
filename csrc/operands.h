/*
 * operands.h: turning the matrices users hand in (any strides, host or
 * device) into the one form the launchers take (kernels/ladder.h), and the
 * results back. Plain C, no Python: the extension validates arguments with
 * the GIL held, then calls these with it released.
 */
#ifndef FASTSGEMM_OPERANDS_H
#define FASTSGEMM_OPERANDS_H

#include <stdbool.h>
#include <stdint.h>

#include "../kernels/ladder.h"

typedef enum fsg_side { FSG_HOST = 0, FSG_DEVICE = 1 } fsg_side;

/* A 2-D float32 view: element (i, j) is at ptr[i * rs + j * cs].
 * Strides are in elements and may be zero or negative. */
typedef struct fsg_matrix {
    float *ptr;
    int64_t rows, cols;
    int64_t rs, cs;
    fsg_side side;
} fsg_matrix;

typedef enum fsg_layout { FSG_ROW_MAJOR, FSG_COL_MAJOR, FSG_OTHER_LAYOUT } fsg_layout;

/* Row-major or column-major with a positive leading dimension (set in *ld),
 * or neither. */
fsg_layout fsg_classify(const fsg_matrix *m, int64_t *ld);

/* Whether the memory spans of two views intersect: the one overlap test of
 * the extension, for single views and for stacks of `count` views `step`
 * elements apart alike (empty views and views on different sides never do). */
bool fsg_overlap(const fsg_matrix *x, const fsg_matrix *y);
/* The same test on views of any rank (fastsgemm.matmul's operands): `ndim`
 * extents and strides in elements from the address of the first element. */
bool fsg_views_overlap(uintptr_t x, int x_ndim, const int64_t *x_extent, const int64_t *x_stride, uintptr_t y,
                       int y_ndim, const int64_t *y_extent, const int64_t *y_stride);
bool fsg_stacks_overlap(const fsg_matrix *x, int64_t x_count, int64_t x_step, const fsg_matrix *y, int64_t y_count,
                        int64_t y_step);

/* Whether two views are one: the same memory in the same layout (C given as
 * out itself is BLAS's in-place update, not an alias). */
bool fsg_same_view(const fsg_matrix *x, const fsg_matrix *y);

/* Whether two different elements of one view share an address (exact, from
 * the shape and strides): such a view cannot hold a result. */
bool fsg_elements_overlap(const fsg_matrix *m);

/* D = alpha * A * B + beta * C into `out`, with `rung` through `launch`: the
 * rung's own launcher or one of its configurations'. C may be NULL only when
 * beta == 0. Every matrix is on one side; a CUDA rung with host matrices
 * stages them through the device on `stream` and synchronises before it
 * returns. Shapes must already agree. Returns the first error. */
cudaError_t fsg_run_gemm(const fsg_rung *rung, fsg_launcher launch, const fsg_fill *fill, const fsg_matrix *a,
                         const fsg_matrix *b, const fsg_matrix *c, const fsg_matrix *out, float alpha, float beta,
                         cudaStream_t stream);

/* Whether a stack of `count` products (as fsg_run_batch takes them) is one
 * matrix product: a shared B with A's and out's matrices row after row, end
 * to end ((count m) x k times B: a Linear layer on a batch), or a shared A
 * with B's and out's side by side, column after column, within a kernel's
 * largest M and N (max_dim). Sets that product's views either way (the
 * stack's first product's when not). */
bool fsg_batch_as_one(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, int64_t count,
                      int64_t step_a, int64_t step_b, int64_t step_out, int64_t max_dim, fsg_matrix *one_a,
                      fsg_matrix *one_b, fsg_matrix *one_out);

/* A stack of `count` products on the GPU: out_p = A_p B_p, where A_p, B_p
 * and out_p are the views a, b and out moved on by p * step_a, p * step_b and
 * p * step_out elements (a step of 0: a matrix every product shares). out's
 * products must be distinct from each other and from A's and B's memory (the
 * caller checks). A stack that lies as one matrix (a shared B with A's and
 * out's matrices end to end, or a shared A with B's and out's side by side)
 * runs as one product; with a launch_batch (ladder.h; NULL: none) the rest
 * runs in one launch per kFsgMaxBatch products where every view is row- or
 * column-major and K > 0, and product by product through `launch` otherwise.
 * in_order: product by product whatever the stack (an out whose products may
 * share elements: the last write wins, as in order). max_dim: the kernel's
 * largest M and N, which a stack folded into one product must keep. Returns the
 * first error. */
cudaError_t fsg_run_batch(const fsg_rung *rung, fsg_launcher launch, const fsg_fill *fill, fsg_batch_launcher launch_batch,
                          int64_t max_dim, bool in_order, const fsg_matrix *a, const fsg_matrix *b,
                          const fsg_matrix *out, int64_t count, int64_t step_a, int64_t step_b, int64_t step_out,
                          cudaStream_t stream);

/* dst = src for two views of one shape, on either side; synchronises before
 * returning when the destination is on the host. */
cudaError_t fsg_copy(const fsg_matrix *dst, const fsg_matrix *src, cudaStream_t stream);

#endif /* FASTSGEMM_OPERANDS_H */
