/*
 * operands.c: everything between "here are four matrices of any layout" and
 * one launcher call on row-/column-major operands (see operands.h).
 *
 * The rules, in the order fsg_run_gemm applies them:
 *   - A and B that are row- or column-major on the rung's side go to the
 *     launcher as they are (pointer, leading dimension, transpose flag): no
 *     copy. Anything else (other strides, or the other side of the PCIe bus)
 *     is copied once into a dense temporary on the rung's side.
 *   - D is written straight into `out` when out is on the rung's side, row- or
 *     column-major, and shares no memory with A or B (nor with C, unless C is
 *     out itself: the in-place BLAS update). Otherwise into a temporary that is
 *     copied to out at the end.
 *   - A column-major D is computed as the row-major D^T = B^T A^T, so the
 *     launchers only ever see a row-major D.
 *   - C goes to the launcher as is when it has D's layout on the rung's side;
 *     otherwise it is first copied into D, and the launcher updates D in place.
 *   - Copies between pageable host memory and the GPU of 2 MB or more go
 *     through pinned buffers and several host threads (staging.c).
 *   - Split-K, for accuracy: a ladder rung sums the K products of an element
 *     into one FP32 accumulator, whose rounding error grows with K. For K past
 *     kSplitFromK (when the workspace is affordable) the rung instead computes
 *     K-slices of kSplitSlice into a workspace, and the slices are summed in
 *     order with alpha, beta and C applied once. The tensor-core rungs, whose
 *     sums need no short slices, are sliced only as far as one wave of their
 *     blocks fills the GPU (ladder.h's fsg_fill). cuBLAS keeps its own strategy.
 */
#include "operands.h"

#include <stdlib.h>

#include "staging.h"
#include "support/device_memory.h"

enum { kMaxTemps = 16 };

/* Split-K: slices of 512 keep each sequential sum short (error like sqrt(512)
 * rather than sqrt(K)); K up to 4096 is never split, so the ladder's benchmark
 * shapes run unsplit; the workspace (slices x m x n floats) stays under 64 MiB. */
enum { kSplitFromK = 4097, kSplitSlice = 512, kMaxSlices = 128, kSliceMultiple = 32 };
static const int64_t kSplitWorkspaceBytes = (int64_t)64 << 20;

static int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

fsg_layout fsg_classify(const fsg_matrix *m, int64_t *ld) {
    const int64_t rows = m->rows, cols = m->cols;
    if ((cols <= 1 || m->cs == 1) && (rows <= 1 || m->rs >= max64(cols, 1))) {
        *ld = rows <= 1 ? max64(cols, 1) : m->rs;
        return FSG_ROW_MAJOR;
    }
    if ((rows <= 1 || m->rs == 1) && (cols <= 1 || m->cs >= max64(rows, 1))) {
        *ld = cols <= 1 ? max64(rows, 1) : m->cs;
        return FSG_COL_MAJOR;
    }
    *ld = 0;
    return FSG_OTHER_LAYOUT;
}

/* First and one-past-last byte address [*lo, *hi) a view of `ndim` extents
 * and strides (elements, any sign) names from `ptr`; false, and no span, for
 * an empty view. Where a span cannot be counted in 64 bits it is taken as
 * the whole address space, so that the callers, who compute into a temporary
 * where views overlap, stay safe. */
static bool span_of(uintptr_t ptr, int ndim, const int64_t *extent, const int64_t *stride, uintptr_t *lo,
                    uintptr_t *hi) {
    int64_t first = 0, last = 0;
    bool wraps = false;
    for (int i = 0; i < ndim; ++i) {
        if (extent[i] == 0) return false;
        int64_t reach;
        wraps |= __builtin_mul_overflow(extent[i] - 1, stride[i], &reach);
        wraps |= __builtin_add_overflow(reach < 0 ? first : last, reach, reach < 0 ? &first : &last);
    }
    int64_t first_byte, end_byte;
    wraps |= __builtin_mul_overflow(first, (int64_t)sizeof(float), &first_byte) ||
             __builtin_add_overflow(last, (int64_t)1, &end_byte) ||
             __builtin_mul_overflow(end_byte, (int64_t)sizeof(float), &end_byte);
    // The address arithmetic itself must not wrap either (a pointer near either end of the address space).
    wraps |= (first_byte < 0 && (uintptr_t)(-(first_byte + 1)) >= ptr) || (uintptr_t)end_byte > UINTPTR_MAX - ptr;
    *lo = wraps ? 0 : ptr + (uintptr_t)first_byte;
    *hi = wraps ? UINTPTR_MAX : ptr + (uintptr_t)end_byte;
    return true;
}

bool fsg_views_overlap(uintptr_t x, int x_ndim, const int64_t *x_extent, const int64_t *x_stride, uintptr_t y,
                       int y_ndim, const int64_t *y_extent, const int64_t *y_stride) {
    uintptr_t xlo, xhi, ylo, yhi;
    if (!span_of(x, x_ndim, x_extent, x_stride, &xlo, &xhi) || !span_of(y, y_ndim, y_extent, y_stride, &ylo, &yhi))
        return false;  // an empty view names no memory
    return xlo < yhi && ylo < xhi;
}

bool fsg_stacks_overlap(const fsg_matrix *x, int64_t x_count, int64_t x_step, const fsg_matrix *y, int64_t y_count,
                        int64_t y_step) {
    if (x->side != y->side) return false;  // host and device addresses are different spaces
    const int64_t x_extent[3] = {x->rows, x->cols, x_count}, x_stride[3] = {x->rs, x->cs, x_step};
    const int64_t y_extent[3] = {y->rows, y->cols, y_count}, y_stride[3] = {y->rs, y->cs, y_step};
    return fsg_views_overlap((uintptr_t)x->ptr, 3, x_extent, x_stride, (uintptr_t)y->ptr, 3, y_extent, y_stride);
}

bool fsg_overlap(const fsg_matrix *x, const fsg_matrix *y) { return fsg_stacks_overlap(x, 1, 0, y, 1, 0); }

/* |x|, with -2^63 (a stride no memory can have) counted as 2^63 - 1. */
static int64_t magnitude(int64_t x) { return x >= 0 ? x : x == INT64_MIN ? INT64_MAX : -x; }

static int64_t gcd64(int64_t x, int64_t y) {
    while (y != 0) {
        const int64_t t = x % y;
        x = y;
        y = t;
    }
    return x;
}

/* With strides s1 <= s2 (absolute values) over extents n1 and n2, elements
 * (i, j) and (i + di, j -/+ dj) coincide when di s1 = dj s2; the smallest
 * nonzero solution is di = s2 / g, dj = s1 / g with g = gcd(s1, s2), so the
 * view overlaps itself exactly when that solution fits in its extents. */
bool fsg_elements_overlap(const fsg_matrix *m) {
    int64_t s1 = magnitude(m->rs), n1 = m->rows, s2 = magnitude(m->cs), n2 = m->cols;
    if (n1 == 0 || n2 == 0) return false;
    if (n1 == 1 || n2 == 1) return (n1 > 1 && s1 == 0) || (n2 > 1 && s2 == 0);  // a row or a column
    if (s1 > s2) {
        int64_t t = s1;
        s1 = s2;
        s2 = t;
        t = n1;
        n1 = n2;
        n2 = t;
    }
    if (s1 == 0) return true;
    const int64_t g = gcd64(s1, s2);
    return s2 / g < n1 && s1 / g < n2;
}

bool fsg_same_view(const fsg_matrix *x, const fsg_matrix *y) {
    if (x->ptr != y->ptr || x->rows != y->rows || x->cols != y->cols || x->side != y->side) return false;
    int64_t ldx, ldy;
    const fsg_layout lx = fsg_classify(x, &ldx), ly = fsg_classify(y, &ldy);
    if (lx != FSG_OTHER_LAYOUT) return lx == ly && ldx == ldy;
    return x->rs == y->rs && x->cs == y->cs;
}

/* ---- temporaries: every buffer a call allocates, freed in one place ---- */

typedef struct scratch {
    struct {
        void *ptr;
        fsg_side side;
        size_t bytes;
    } items[kMaxTemps];
    int count;
    cudaStream_t stream;
    bool used_stream; /* CUDA work was enqueued on `stream` */
} scratch;

static cudaError_t scratch_alloc(scratch *s, fsg_side side, int64_t elements, float **out) {
    if (s->count == kMaxTemps) return cudaErrorUnknown;  // more temporaries than any plan makes: a bug
    const size_t bytes = sizeof(float) * (size_t)max64(elements, 1);
    void *p = NULL;
    if (side == FSG_HOST) {
        p = malloc(bytes);
        if (p == NULL) return cudaErrorMemoryAllocation;
    } else {
        // Stream-ordered: the memory is free for reuse only after the work
        // queued before the matching cudaFreeAsync has run.
        cudaError_t err = fsg_memory_take(-1, bytes);
        if (err != cudaSuccess) return err;
        err = cudaMallocAsync(&p, bytes, s->stream);
        if (err != cudaSuccess) {
            fsg_memory_give(-1, bytes);
            return err;
        }
        s->used_stream = true;
    }
    s->items[s->count].ptr = p;
    s->items[s->count].side = side;
    s->items[s->count].bytes = bytes;
    s->count++;
    *out = p;
    return cudaSuccess;
}

/* Frees every temporary; returns `status`, or the first error met here if
 * status was success. */
static cudaError_t scratch_release(scratch *s, cudaError_t status) {
    bool host_temps = false;
    for (int i = 0; i < s->count; ++i) host_temps |= s->items[i].side == FSG_HOST;
    if (host_temps && s->used_stream) {
        // Copies still in flight may read or write host temporaries.
        cudaError_t err = cudaStreamSynchronize(s->stream);
        if (status == cudaSuccess) status = err;
    }
    for (int i = 0; i < s->count; ++i) {
        if (s->items[i].side == FSG_HOST) {
            free(s->items[i].ptr);
        } else {
            cudaError_t err = cudaFreeAsync(s->items[i].ptr, s->stream);
            if (err == cudaSuccess) fsg_memory_give(-1, s->items[i].bytes);  // on the device it was taken on
            if (status == cudaSuccess) status = err;
        }
    }
    s->count = 0;
    return status;
}

/* A new dense rows x cols temporary on `side`, row- or column-major. */
static cudaError_t make_dense(scratch *s, fsg_side side, int64_t rows, int64_t cols, fsg_layout layout,
                              fsg_matrix *out) {
    float *p;
    cudaError_t err = scratch_alloc(s, side, rows * cols, &p);
    if (err != cudaSuccess) return err;
    const bool col = layout == FSG_COL_MAJOR;
    *out = (fsg_matrix){
        .ptr = p, .rows = rows, .cols = cols, .rs = col ? 1 : cols, .cs = col ? rows : 1, .side = side};
    return cudaSuccess;
}

/* ---- copies ---- */

static void copy_on_host(const fsg_matrix *dst, const fsg_matrix *src) {
    for (int64_t i = 0; i < dst->rows; ++i)
        for (int64_t j = 0; j < dst->cols; ++j) dst->ptr[i * dst->rs + j * dst->cs] = src->ptr[i * src->rs + j * src->cs];
}

/* dst = src, both on one side. */
static cudaError_t copy_same_side(scratch *s, const fsg_matrix *dst, const fsg_matrix *src) {
    if (dst->side == FSG_HOST) {
        copy_on_host(dst, src);
        return cudaSuccess;
    }
    s->used_stream = true;
    return fsg_copy_matrix_cuda(dst->ptr, dst->rs, dst->cs, src->ptr, src->rs, src->cs, dst->rows, dst->cols,
                                s->stream);
}

/* One cudaMemcpy2DAsync between two views of the same row- or column-major
 * layout (each with its own leading dimension), across or within sides. */
static cudaError_t copy_2d(scratch *s, const fsg_matrix *dst, int64_t dst_ld, const fsg_matrix *src,
                           int64_t src_ld, fsg_layout layout) {
    const bool row = layout == FSG_ROW_MAJOR;
    const size_t width = sizeof(float) * (size_t)(row ? src->cols : src->rows);
    const size_t height = (size_t)(row ? src->rows : src->cols);
    s->used_stream = true;
    if (dst->side != src->side) {  // large pageable host memory goes through pinned buffers (staging.c)
        bool staged;
        const cudaError_t err = fsg_staged_copy_2d(dst->ptr, sizeof(float) * (size_t)dst_ld, src->ptr,
                                                   sizeof(float) * (size_t)src_ld, width, height,
                                                   dst->side == FSG_DEVICE ? FSG_TO_DEVICE : FSG_TO_HOST, s->stream,
                                                   &staged);
        if (staged) return err;
    }
    return cudaMemcpy2DAsync(dst->ptr, sizeof(float) * (size_t)dst_ld, src->ptr, sizeof(float) * (size_t)src_ld,
                             width, height, cudaMemcpyDefault, s->stream);
}

/* dst = src for views of one shape on any sides. Across sides the bytes move
 * in a single 2-D copy; a layout the copy engine cannot take is repacked on
 * one side first. */
static cudaError_t move_matrix(scratch *s, const fsg_matrix *dst, const fsg_matrix *src) {
    if (dst->rows == 0 || dst->cols == 0) return cudaSuccess;
    if (dst->side == src->side) return copy_same_side(s, dst, src);

    int64_t dst_ld, src_ld;
    const fsg_layout dst_layout = fsg_classify(dst, &dst_ld), src_layout = fsg_classify(src, &src_ld);
    if (dst_layout != FSG_OTHER_LAYOUT && dst_layout == src_layout)
        return copy_2d(s, dst, dst_ld, src, src_ld, dst_layout);

    cudaError_t err;
    if (dst_layout != FSG_OTHER_LAYOUT) {
        // Repack src where it is into dst's layout, then move it in one copy.
        fsg_matrix packed;
        int64_t packed_ld;
        if ((err = make_dense(s, src->side, src->rows, src->cols, dst_layout, &packed))) return err;
        if ((err = copy_same_side(s, &packed, src))) return err;
        fsg_classify(&packed, &packed_ld);
        return copy_2d(s, dst, dst_ld, &packed, packed_ld, dst_layout);
    }
    // dst has an odd layout: land src densely on dst's side, then scatter.
    fsg_matrix landed, dense_src = *src;
    int64_t landed_ld, dense_ld = src_ld;
    fsg_layout moved_layout = src_layout;
    if (src_layout == FSG_OTHER_LAYOUT) {
        moved_layout = FSG_ROW_MAJOR;
        if ((err = make_dense(s, src->side, src->rows, src->cols, moved_layout, &dense_src))) return err;
        if ((err = copy_same_side(s, &dense_src, src))) return err;
        fsg_classify(&dense_src, &dense_ld);
    }
    if ((err = make_dense(s, dst->side, src->rows, src->cols, moved_layout, &landed))) return err;
    fsg_classify(&landed, &landed_ld);
    if ((err = copy_2d(s, &landed, landed_ld, &dense_src, dense_ld, moved_layout))) return err;
    if (dst->side == FSG_HOST && (err = cudaStreamSynchronize(s->stream))) return err;
    return copy_same_side(s, dst, &landed);
}

cudaError_t fsg_copy(const fsg_matrix *dst, const fsg_matrix *src, cudaStream_t stream) {
    scratch s = {.stream = stream};
    cudaError_t err = move_matrix(&s, dst, src);
    if (err == cudaSuccess && dst->side == FSG_HOST && s.used_stream) err = cudaStreamSynchronize(stream);
    return scratch_release(&s, err);
}

/* ---- the GEMM plan ---- */

/* An input operand as the launcher takes it: on the rung's side, row- or
 * column-major. Copied once if it is not already so. */
static cudaError_t stage_input(scratch *s, fsg_side work, const fsg_matrix *x, const float **ptr, int64_t *ld,
                               bool *trans) {
    if (x->rows == 0 || x->cols == 0) {
        // k == 0: never read, but cuBLAS still checks the leading dimension.
        *ptr = x->ptr;
        *ld = max64(1, max64(x->rows, x->cols));
        *trans = false;
        return cudaSuccess;
    }
    fsg_layout layout = fsg_classify(x, ld);
    if (x->side == work && layout != FSG_OTHER_LAYOUT) {
        *ptr = x->ptr;
        *trans = layout == FSG_COL_MAJOR;
        return cudaSuccess;
    }
    if (layout == FSG_OTHER_LAYOUT) layout = FSG_ROW_MAJOR;
    fsg_matrix dense;
    cudaError_t err = make_dense(s, work, x->rows, x->cols, layout, &dense);
    if (err == cudaSuccess) err = move_matrix(s, &dense, x);
    *ptr = dense.ptr;
    *trans = fsg_classify(&dense, ld) == FSG_COL_MAJOR;
    return err;
}

/* How many K-slices to run a launcher of `rung` in (1: no split), by the
 * launcher's `fill` (ladder.h: the rung's own, or its configuration's). */
static int64_t k_slices(const fsg_rung *rung, const fsg_fill *fill, int64_t m, int64_t n, int64_t k) {
    if (rung->number < 0) return 1;  // cuBLAS splits (or not) by itself
    if (fill->whole_k) return 1;      // a launcher that takes any K whole (ladder.h): the same bits at any M and N
    // An engine configuration's short_slice: a short K is cut too, into slices of at least short_slice (all but the
    // last, launch_split_k's remainder).
    const bool short_k = fill->short_slice > 0 && k >= 2 * (int64_t)fill->short_slice;
    if (k < kSplitFromK && !short_k) return 1;
    int64_t slices = short_k ? k / fill->short_slice : (k + kSplitSlice - 1) / kSplitSlice;
    int device, sms;
    if (fill->tile_m > 0 && cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) {
        // Slices only to fill one wave: more would be summed for nothing, and a part wave leaves SMs idle.
        const int64_t blocks = ((m + fill->tile_m - 1) / fill->tile_m) * ((n + fill->tile_n - 1) / fill->tile_n);
        const int64_t wave = (int64_t)sms * fill->blocks_per_sm;
        const int64_t to_fill = blocks >= wave ? 1 : wave / blocks;
        if (to_fill < slices) slices = to_fill;
    }
    const int64_t affordable = kSplitWorkspaceBytes / (m * n * (int64_t)sizeof(float));
    if (slices > affordable) slices = affordable;
    if (slices > kMaxSlices) slices = kMaxSlices;
    return slices >= 2 ? slices : 1;
}

/* D = alpha * A B + beta * C as the sum, in order, of at most `slices`
 * K-slices, all computed by one launch of the rung (ladder.h's k_slice) into a
 * workspace on `work`'s side, then summed. */
static cudaError_t launch_split_k(scratch *s, fsg_launcher launch, fsg_side work, const fsg_gemm *g, int64_t slices,
                                  cudaStream_t stream) {
    const int64_t m = g->m, n = g->n, per = (g->k + slices - 1) / slices;
    // Whole k-tiles of the Hopper paths (32), which also keeps slice starts 16-byte aligned for the vector rungs.
    const int64_t step = (per + kSliceMultiple - 1) / kSliceMultiple * kSliceMultiple;
    const int64_t used = (g->k + step - 1) / step;  // <= slices, since step >= per
    float *w;
    cudaError_t err = scratch_alloc(s, work, used * m * n, &w);
    if (err != cudaSuccess) return err;
    fsg_gemm parts = *g;
    parts.k_slice = step;
    parts.alpha = 1.0f;
    parts.beta = 0.0f;
    parts.c = NULL;
    parts.d = w;  // slice t at w + t * m * n
    parts.ldd = n;
    if ((err = launch(&parts, stream))) return err;
    if (work == FSG_DEVICE)
        return fsg_sum_k_slices_cuda(g->d, g->ldd, g->c, g->ldc, g->alpha, g->beta, w, (int)used, m, n, stream);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (int64_t t = 0; t < used; ++t) sum += w[t * m * n + i * n + j];
            float result = g->alpha * sum;
            if (g->c != NULL) result += g->beta * g->c[i * g->ldc + j];
            g->d[i * g->ldd + j] = result;
        }
    return cudaSuccess;
}

/* Row-major D^T = B^T A^T stands for column-major D = A B. */
static void transpose_problem(fsg_gemm *g) {
    const fsg_gemm t = *g;
    g->m = t.n;
    g->n = t.m;
    g->a = t.b;
    g->lda = t.ldb;
    g->a_trans = !t.b_trans;
    g->b = t.a;
    g->ldb = t.lda;
    g->b_trans = !t.a_trans;
}

/* Whether the kernels can read C in place in D's layout (every one reads C(i, j) at c[i * ldc + j] of the problem
 * in that layout), and its ldc: C laid out as D is, or a vector broadcast along D's slower dimension (a row stride
 * of zero where D is row-major: a Linear's bias, every row the same), which ldc = 0 reads as it lies. */
static bool c_reads_as(const fsg_matrix *c, fsg_layout d_layout, int64_t *ldc) {
    if (fsg_classify(c, ldc) == d_layout) return true;
    const bool along_rows = d_layout == FSG_ROW_MAJOR && c->rs == 0 && (c->cols <= 1 || c->cs == 1);
    const bool along_cols = d_layout == FSG_COL_MAJOR && c->cs == 0 && (c->rows <= 1 || c->rs == 1);
    *ldc = 0;
    return along_rows || along_cols;
}

cudaError_t fsg_run_gemm(const fsg_rung *rung, fsg_launcher launch, const fsg_fill *fill, const fsg_matrix *a,
                         const fsg_matrix *b, const fsg_matrix *c, const fsg_matrix *out, float alpha, float beta,
                         cudaStream_t stream) {
    const int64_t m = out->rows, n = out->cols, k = a->cols;
    if (m == 0 || n == 0) return cudaSuccess;
    const fsg_side work = rung->device == FSG_DEVICE_CUDA ? FSG_DEVICE : FSG_HOST;
    // A failure left over from an earlier call must not be reported as this one's.
    if (work == FSG_DEVICE) cudaGetLastError();

    scratch s = {.stream = stream};
    fsg_gemm g = {.m = m, .n = n, .k = k, .alpha = alpha, .beta = beta};
    cudaError_t err;
    if ((err = stage_input(&s, work, a, &g.a, &g.lda, &g.a_trans))) goto exit;
    if ((err = stage_input(&s, work, b, &g.b, &g.ldb, &g.b_trans))) goto exit;

    int64_t out_ld;
    const fsg_layout out_layout = fsg_classify(out, &out_ld);
    const bool c_is_out = c != NULL && fsg_same_view(c, out);
    const bool direct = out->side == work && out_layout != FSG_OTHER_LAYOUT && !fsg_overlap(out, a) &&
                        !fsg_overlap(out, b) && (c == NULL || c_is_out || !fsg_overlap(out, c));
    fsg_matrix d = *out;
    if (!direct) {
        const fsg_layout layout = out_layout == FSG_COL_MAJOR ? FSG_COL_MAJOR : FSG_ROW_MAJOR;
        if ((err = make_dense(&s, work, m, n, layout, &d))) goto exit;
    }
    const fsg_layout d_layout = fsg_classify(&d, &g.ldd);
    g.d = d.ptr;

    if (beta != 0.0f) {
        int64_t ldc;
        if (c->side == work && c_reads_as(c, d_layout, &ldc) && (fsg_same_view(c, &d) || !fsg_overlap(c, &d))) {
            g.c = c->ptr;
            g.ldc = ldc;
        } else {
            if ((err = move_matrix(&s, &d, c))) goto exit;
            g.c = d.ptr;
            g.ldc = g.ldd;
        }
    }

    if (d_layout == FSG_COL_MAJOR) transpose_problem(&g);
    if (work == FSG_DEVICE) s.used_stream = true;
    const int64_t slices = k_slices(rung, fill, g.m, g.n, g.k);
    err = slices > 1 ? launch_split_k(&s, launch, work, &g, slices, stream) : launch(&g, stream);
    if (err) goto exit;
    if (out->side == FSG_HOST && work == FSG_DEVICE) {  // while the GPU computes, fault in out's pages
        uintptr_t lo, hi;
        const int64_t extent[2] = {out->rows, out->cols}, stride[2] = {out->rs, out->cs};
        // Only where out fills most of its span: a narrow view of a huge array would commit the whole array.
        if (span_of((uintptr_t)out->ptr, 2, extent, stride, &lo, &hi) && hi - lo <= 2 * sizeof(float) * (size_t)(m * n))
            fsg_prefault_host((void *)lo, hi - lo);
    }
    if (!direct && (err = move_matrix(&s, out, &d))) goto exit;
    if (out->side == FSG_HOST && s.used_stream) err = cudaStreamSynchronize(stream);

exit:
    err = scratch_release(&s, err);
    if (err != cudaSuccess && s.used_stream) cudaGetLastError();  // leave no non-sticky error behind
    return err;
}

/* ---- stacks of products (fastsgemm.matmul) ---- */

/* View x moved on by `step` elements. */
static fsg_matrix moved(const fsg_matrix *x, int64_t step) {
    fsg_matrix y = *x;
    y.ptr += step;
    return y;
}

bool fsg_batch_as_one(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, int64_t count,
                      int64_t step_a, int64_t step_b, int64_t step_out, int64_t max_dim, fsg_matrix *one_a,
                      fsg_matrix *one_b, fsg_matrix *one_out) {
    const int64_t m = out->rows, n = out->cols;
    *one_a = *a, *one_b = *b, *one_out = *out;
    if (m == 0 || n == 0 || count > max_dim / (m > n ? m : n)) return false;  // past the kernel's largest M or N
    if (count > 1 && step_b == 0 && a->rs != 0 && out->rs != 0 && step_a == m * a->rs && step_out == m * out->rs) {
        one_a->rows = one_out->rows = count * m;  // A's and out's matrices row after row: (count m) x k times B
        return true;
    }
    if (count > 1 && step_a == 0 && b->cs != 0 && out->cs != 0 && step_b == n * b->cs && step_out == n * out->cs) {
        one_b->cols = one_out->cols = count * n;  // B's and out's matrices column after column: A times k x (count n)
        return true;
    }
    return false;
}

cudaError_t fsg_run_batch(const fsg_rung *rung, fsg_launcher launch, const fsg_fill *fill, fsg_batch_launcher launch_batch,
                          int64_t max_dim, bool in_order, const fsg_matrix *a, const fsg_matrix *b,
                          const fsg_matrix *out, int64_t count, int64_t step_a, int64_t step_b, int64_t step_out,
                          cudaStream_t stream) {
    const int64_t m = out->rows, n = out->cols, k = a->cols;
    if (count == 0 || m == 0 || n == 0) return cudaSuccess;
    if (in_order) launch_batch = NULL;
    // A stack that is one matrix (a Linear layer on a batch): one ordinary product, with the planner's split-K.
    fsg_matrix one_a, one_b, one_out;
    if (!in_order && fsg_batch_as_one(a, b, out, count, step_a, step_b, step_out, max_dim, &one_a, &one_b, &one_out))
        return fsg_run_gemm(rung, launch, fill, &one_a, &one_b, NULL, &one_out, 1.0f, 0.0f, stream);
    fsg_gemm g = {.m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = a->ptr, .b = b->ptr, .d = out->ptr};
    const fsg_layout a_layout = fsg_classify(a, &g.lda), b_layout = fsg_classify(b, &g.ldb);
    const fsg_layout d_layout = fsg_classify(out, &g.ldd);
    if (launch_batch == NULL || count == 1 || k == 0 || a_layout == FSG_OTHER_LAYOUT || b_layout == FSG_OTHER_LAYOUT ||
        d_layout == FSG_OTHER_LAYOUT) {
        // Product by product: each an ordinary call, which copies odd layouts and splits a long K as it needs.
        for (int64_t p = 0; p < count; ++p) {
            const fsg_matrix a_p = moved(a, p * step_a), b_p = moved(b, p * step_b), out_p = moved(out, p * step_out);
            const cudaError_t err = fsg_run_gemm(rung, launch, fill, &a_p, &b_p, NULL, &out_p, 1.0f, 0.0f, stream);
            if (err != cudaSuccess) return err;
        }
        return cudaSuccess;
    }
    cudaGetLastError();  // a failure left over from an earlier call must not be reported as this one's
    g.a_trans = a_layout == FSG_COL_MAJOR;
    g.b_trans = b_layout == FSG_COL_MAJOR;
    fsg_batch batch = {.step_a = step_a, .step_b = step_b, .step_d = step_out};
    if (d_layout == FSG_COL_MAJOR) {  // D^T = B^T A^T, product by product
        transpose_problem(&g);
        batch.step_a = step_b;
        batch.step_b = step_a;
    }
    cudaError_t err = cudaSuccess;
    for (int64_t first = 0; first < count && err == cudaSuccess; first += kFsgMaxBatch) {  // grid z's limit
        fsg_gemm chunk = g;
        batch.count = count - first < kFsgMaxBatch ? count - first : kFsgMaxBatch;
        chunk.a += first * batch.step_a;
        chunk.b += first * batch.step_b;
        chunk.d += first * batch.step_d;
        err = launch_batch(&chunk, &batch, stream);
    }
    if (err != cudaSuccess) cudaGetLastError();  // leave no non-sticky error behind
    return err;
}
