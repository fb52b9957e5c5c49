/*
 * interruptible.c: host-rung (cpu) GEMMs that Ctrl-C can stop.
 *
 * A call holds no GIL while it computes, so a SIGINT only sets CPython's flag,
 * and KeyboardInterrupt used to come when the call returned: 18 s late at
 * 6144^3. Here the problem is cut into column panels of out (with the matching
 * columns of B and C), each run through fsg_run_gemm with the GIL released;
 * between panels the GIL is taken back and PyErr_CheckSignals() runs the
 * Python-level handlers. A pending exception stops the call at a panel edge.
 *
 * What `out` holds after an interrupt: the columns of the panels that finished
 * hold the result, every other column holds what it held before. That holds
 * because each panel is a complete fsg_run_gemm on its own sub-views: whether
 * it writes out directly or through a temporary that it copies back before it
 * returns, it writes only its own columns of out, and only before it returns.
 * It also needs that no panel reads what an earlier panel wrote, so inputs
 * that share memory with out (out=A, out aliasing B, or C overlapping out
 * other than as out itself) are first copied once; C that is out itself (the
 * in-place update) is read by each panel in its own columns only, before they
 * are written.
 *
 * The numbers are those of one call over the whole of out, bit for bit: the
 * cpu rung sums each element over k in order whatever the panel (its own
 * column blocks are kBlockN = 256 wide, hence panels of whole multiples of
 * 256). One exception: past K = 4096 operands.c splits K into slices as far as
 * a 64 MiB workspace of m x n x slices allows, and a panel's n is smaller, so
 * a large problem may be summed in more (more accurate) K-slices than one
 * call over all of out would use.
 */
#include "extension.h"

#include <stdlib.h>

/* A panel is about kPanelFlops of work: 50-100 ms at the 15-30 GFLOP/s the cpu
 * rung reaches on one modern core (longer on slower ones), so Ctrl-C is seen
 * within a tenth of a second or so while the GIL round trip and the per-call
 * set-up stay negligible. Never narrower than kPanelMultiple columns, so past
 * m x k of about 1700 x 1700 a panel is longer: 256 columns of a 6144^3
 * problem take about 0.7 s. */
static const double kPanelFlops = 1.5e9;
enum { kPanelMultiple = 256 };

/* Columns [first, first + count) of a view: its pointer moves by first * cs. */
static fsg_matrix columns(const fsg_matrix *x, int64_t first, int64_t count) {
    fsg_matrix view = *x;
    view.ptr = x->ptr + first * x->cs;
    view.cols = count;
    return view;
}

/* *copy = a dense row-major host copy of x; *buffer is its memory, which the
 * caller frees. */
static cudaError_t detach(const fsg_matrix *x, fsg_matrix *copy, float **buffer, cudaStream_t stream) {
    const int64_t elements = x->rows * x->cols;
    *buffer = malloc(sizeof(float) * (size_t)(elements > 0 ? elements : 1));
    if (*buffer == NULL) return cudaErrorMemoryAllocation;
    *copy = (fsg_matrix){.ptr = *buffer, .rows = x->rows, .cols = x->cols, .rs = x->cols, .cs = 1, .side = FSG_HOST};
    return fsg_copy(copy, x, stream);
}

/* Panel width: whole multiples of kPanelMultiple, about kPanelFlops each. */
static int64_t panel_width(int64_t m, int64_t n, int64_t k) {
    const double per_column = 2.0 * (double)m * (double)(k > 0 ? k : 1);
    const double fit = kPanelFlops / per_column;
    if (fit >= (double)n) return n;
    const int64_t width = (int64_t)(fit / kPanelMultiple) * kPanelMultiple;
    return width > kPanelMultiple ? width : kPanelMultiple;
}

int run_host_gemm_interruptible(const fsg_rung *rung, fsg_launcher launch, const fsg_fill *fill, const fsg_matrix *a,
                                const fsg_matrix *b, const fsg_matrix *c, const fsg_matrix *out, float alpha,
                                float beta, cudaStream_t stream, cudaError_t *result) {
    const int64_t m = out->rows, n = out->cols, k = a->cols;
    const int64_t width = panel_width(m, n, k);
    cudaError_t err = cudaSuccess;
    if (width >= n) {
        // One panel: exactly the call as it always was.
        Py_BEGIN_ALLOW_THREADS
        err = fsg_run_gemm(rung, launch, fill, a, b, c, out, alpha, beta, stream);
        Py_END_ALLOW_THREADS
        *result = err;
        return 0;
    }

    // Inputs that share memory with out are copied once, so that no panel reads
    // columns another has written. A with another layout than row- or
    // column-major is copied once too: else every panel would repack it whole.
    fsg_matrix a_use = *a, b_use = *b, c_use;
    float *a_copy = NULL, *b_copy = NULL, *c_copy = NULL;
    int64_t ld;
    const bool copy_a = fsg_overlap(a, out) || (k > 0 && fsg_classify(a, &ld) == FSG_OTHER_LAYOUT);
    const bool copy_b = fsg_overlap(b, out);
    const bool copy_c = c != NULL && beta != 0.0f && !fsg_same_view(c, out) && fsg_overlap(c, out);
    if (c != NULL) c_use = *c;
    Py_BEGIN_ALLOW_THREADS
    if (copy_a) err = detach(a, &a_use, &a_copy, stream);
    if (err == cudaSuccess && copy_b) err = detach(b, &b_use, &b_copy, stream);
    if (err == cudaSuccess && copy_c) err = detach(c, &c_use, &c_copy, stream);
    Py_END_ALLOW_THREADS

    int status = 0;
    for (int64_t first = 0; first < n && err == cudaSuccess; first += width) {
        // The signal check comes before each panel, the first included: a Ctrl-C
        // during the copies above stops the call with out untouched.
        if (PyErr_CheckSignals() < 0) {
            status = -1;
            break;
        }
        const int64_t count = n - first < width ? n - first : width;
        const fsg_matrix out_panel = columns(out, first, count), b_panel = columns(&b_use, first, count);
        const fsg_matrix c_panel = c != NULL ? columns(&c_use, first, count) : (fsg_matrix){0};
        Py_BEGIN_ALLOW_THREADS
        err = fsg_run_gemm(rung, launch, fill, &a_use, &b_panel, c != NULL ? &c_panel : NULL, &out_panel, alpha, beta,
                           stream);
        Py_END_ALLOW_THREADS
    }
    free(a_copy);
    free(b_copy);
    free(c_copy);
    *result = err;
    return status;
}
