/*
 * call.c: the call machinery under the module's functions and the fast path:
 * reading operands as the private interface passes them, choosing a kernel,
 * and running one GEMM or a stack of them on the operands' device with the
 * GIL released. Called by csrc/_sgemm.c, csrc/fast_call.c and csrc/timing.c;
 * calls down into csrc/operands.c, csrc/allocation.c, csrc/device_context.c
 * and csrc/errors.c, never up.
 */
#include "extension.h"

#include <stdbool.h>

/* ---- operands ---- */

void release_operand(operand *op) {
    if (op->has_view) PyBuffer_Release(&op->view);
    op->has_view = 0;
}

/* Reads one operand: a device tuple or a host buffer of float32. */
int parse_operand(module_state *st, PyObject *obj, const char *name, int writable, operand *op) {
    memset(op, 0, sizeof *op);
    op->device = -1;
    if (PyTuple_Check(obj)) {
        unsigned long long ptr;
        long long rows, cols, rs, cs;
        if (!PyArg_ParseTuple(obj, "KLLLL;device operand must be (pointer, rows, cols, row_stride, col_stride)", &ptr,
                              &rows, &cols, &rs, &cs))
            return -1;
        if (rows < 0 || cols < 0) {
            PyErr_Format(PyExc_ValueError, "%s: negative dimension %lld x %lld", name, rows, cols);
            return -1;
        }
        op->mat = (fsg_matrix){.ptr = (float *)(uintptr_t)ptr, .rows = rows, .cols = cols, .rs = rs, .cs = cs,
                               .side = FSG_DEVICE};
        if (rows > 0 && cols > 0 && check_device_operand(st, &op->mat, name, &op->device) < 0) return -1;
        return 0;
    }

    const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &op->view, flags) < 0) return -1;
    op->has_view = 1;
    const Py_buffer *v = &op->view;
    const char *fmt = v->format != NULL ? v->format : "B";
    if (!(strcmp(fmt, "f") == 0 || strcmp(fmt, "<f") == 0 || strcmp(fmt, "=f") == 0) || v->itemsize != 4) {
        PyErr_Format(PyExc_TypeError, "%s: expected native float32 data, got buffer format '%s'", name, fmt);
        goto fail;
    }
    if (v->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 2-D matrix, got %d dimensions", name, v->ndim);
        goto fail;
    }
    if (v->strides[0] % 4 != 0 || v->strides[1] % 4 != 0 || (uintptr_t)v->buf % 4 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: data or strides not aligned to 4 bytes; pass a copy", name);
        goto fail;
    }
    op->mat = (fsg_matrix){.ptr = v->buf, .rows = v->shape[0], .cols = v->shape[1], .rs = v->strides[0] / 4,
                           .cs = v->strides[1] / 4, .side = FSG_HOST};
    return 0;
fail:
    release_operand(op);
    return -1;
}

int stream_from_object(PyObject *obj, cudaStream_t *stream) {
    if (obj == Py_None) {
        *stream = cudaStreamPerThread;
        return 0;
    }
    void *p = PyLong_AsVoidPtr(obj);
    if (p == NULL && PyErr_Occurred()) return -1;
    *stream = (cudaStream_t)p;
    return 0;
}

/* ---- kernels: a rung, or one of its configurations ---- */

int choose_kernel(long index, long config, kernel_choice *choice) {
    if (index < 0 || index >= fsg_rung_count) {
        PyErr_Format(PyExc_ValueError, "no rung number %ld in the registry", index);
        return -1;
    }
    const fsg_rung *rung = &fsg_rungs[index];
    if (config < -1 || config >= rung->config_count) {
        PyErr_Format(PyExc_ValueError, "rung '%s' has no configuration number %ld", rung->name, config);
        return -1;
    }
    choice->rung = rung;
    if (config < 0) {
        choice->launch = rung->launch;
        choice->max_dim = rung->max_dim;
        choice->launch_batch = rung->launch_batch;
        choice->fill = rung->fill;
        snprintf(choice->name, sizeof choice->name, "%s", rung->name);
    } else {
        choice->launch = rung->configs[config].launch;
        choice->max_dim = rung->configs[config].max_dim;
        choice->launch_batch = rung->configs[config].launch_batch;
        choice->fill = rung->configs[config].fill;
        snprintf(choice->name, sizeof choice->name, "%s:%s", rung->name, rung->configs[config].name);
    }
    return 0;
}

/* A configuration index of -1 also means the rung's own launcher. */
int parse_kernel(PyObject *obj, kernel_choice *choice) {
    long index, config = -1;
    if (PyTuple_Check(obj)) {
        if (!PyArg_ParseTuple(obj, "ll;a kernel is a rung index or (rung index, configuration index)", &index, &config))
            return -1;
    } else {
        index = PyLong_AsLong(obj);
        if (index == -1 && PyErr_Occurred()) return -1;
    }
    return choose_kernel(index, config, choice);
}

/* ---- running one GEMM ---- */

/* What every call checks before it runs, with the GIL held: one side for all
 * operands, one GPU for the device ones (its ordinal in *device, -1 for host
 * operands), a kernel that runs on that side and takes this M and N. Returns
 * 0, or -1 with ValueError set. */
static int check_placement(const kernel_choice *kernel, const operand *ops, int count, int *device) {
    static const char *const names[4] = {"A", "B", "out", "C"};
    const fsg_matrix *a = &ops[0].mat;
    int device_of = -1;
    *device = -1;
    // The work runs on the operands' GPU, whichever is current; they must all live on that one.
    for (int i = 0; i < count; ++i) {
        if (ops[i].mat.side != a->side) {
            PyErr_SetString(PyExc_ValueError, "host and device operands cannot be mixed in one call");
            return -1;
        }
        if (ops[i].device >= 0 && *device >= 0 && ops[i].device != *device) {
            PyErr_Format(PyExc_ValueError,
                         "operands live on different CUDA devices: %s on device %d, %s on device %d; put them on one",
                         names[device_of], *device, names[i], ops[i].device);
            return -1;
        }
        if (ops[i].device >= 0 && *device < 0) *device = ops[i].device, device_of = i;
    }
    if (kernel->rung->device == FSG_DEVICE_CPU && a->side == FSG_DEVICE) {
        PyErr_Format(PyExc_ValueError, "kernel '%s' runs on the host and takes host arrays, not device arrays",
                     kernel->rung->name);
        return -1;
    }
    const int64_t m = ops[2].mat.rows, n = ops[2].mat.cols;
    if (m > kernel->max_dim || n > kernel->max_dim) {
        PyErr_Format(PyExc_ValueError, "kernel '%s' handles M and N up to %lld; got M=%lld, N=%lld", kernel->name,
                     (long long)kernel->max_dim, (long long)m, (long long)n);
        return -1;
    }
    return 0;
}

/* Raises what a failed launch returned; -1. */
/* How to get the cuBLAS this build was compiled for (cublas_api.h's major version): its wheel, whose name lost
 * the -cuNN suffix from CUDA 13 on. */
#define FSG_VERSION_TEXT_(x) #x
#define FSG_VERSION_TEXT(x) FSG_VERSION_TEXT_(x)
#if CUBLAS_VER_MAJOR >= 13
#define CUBLAS_WHEEL "'nvidia-cublas==" FSG_VERSION_TEXT(CUBLAS_VER_MAJOR) ".*'"
#else
#define CUBLAS_WHEEL "nvidia-cublas-cu" FSG_VERSION_TEXT(CUBLAS_VER_MAJOR)
#endif

/* The exception for a rung's CUDA error while `doing` it ("sgemm", "timing"): for the cuBLAS rungs, where cuBLAS
 * could not be opened, the reason and how to install it. Returns -1. */
int raise_kernel_error(module_state *st, const kernel_choice *kernel, cudaError_t err, const char *doing) {
    char what[1400];
    const char *cublas_failure = err == cudaErrorSharedObjectInitFailed && strncmp(kernel->name, "cublas", 6) == 0
                                     ? fsg_cublas_load_failure()
                                     : NULL;
    if (cublas_failure != NULL)
        snprintf(what, sizeof what,
                 "%s with kernel '%s': cuBLAS could not be loaded (%s); install it with `python -m pip install "
                 CUBLAS_WHEEL "`, put the CUDA Toolkit's library directory on LD_LIBRARY_PATH, or name the "
                 "library in FASTSGEMM_CUBLAS_LIBRARY",
                 doing, kernel->name, cublas_failure);
    else
        snprintf(what, sizeof what, "%s with kernel '%s'", doing, kernel->name);
    raise_cuda_error(st, err, what);
    return -1;
}

/* ValueError (1) for an out that names some memory twice: every such element would receive whichever write came
 * last. 0 otherwise. */
static int refuse_overlapping_out(const fsg_matrix *out) {
    if (!fsg_elements_overlap(out)) return 0;
    PyErr_Format(PyExc_ValueError,
                 "out's elements overlap: shape (%lld, %lld) with strides (%lld, %lld) elements names some "
                 "memory twice; pass an out whose elements are distinct",
                 (long long)out->rows, (long long)out->cols, (long long)out->rs, (long long)out->cs);
    return 1;
}

int shapes_agree(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, const fsg_matrix *c) {
    if (a->cols != b->rows || a->rows != out->rows || b->cols != out->cols ||
        (c != NULL && (c->rows != out->rows || c->cols != out->cols))) {
        PyErr_Format(PyExc_ValueError, "shapes do not agree: A %lld x %lld, B %lld x %lld, out %lld x %lld",
                     (long long)a->rows, (long long)a->cols, (long long)b->rows, (long long)b->cols,
                     (long long)out->rows, (long long)out->cols);
        return 0;
    }
    return 1;
}

int run_gemm(module_state *st, const kernel_choice *kernel, operand *ops, int count, double alpha, double beta,
             cudaStream_t stream) {
    const fsg_rung *rung = kernel->rung;
    const fsg_matrix *a = &ops[0].mat, *b = &ops[1].mat, *out = &ops[2].mat, *c = count == 4 ? &ops[3].mat : NULL;
    if (rung->device == FSG_DEVICE_CUDA && refuse_in_forked_child(st) < 0) return -1;
    if (!shapes_agree(a, b, out, c)) return -1;
    if (beta != 0.0 && c == NULL) {
        PyErr_SetString(PyExc_ValueError, "beta != 0 needs a C matrix");
        return -1;
    }
    if (refuse_overlapping_out(out)) return -1;
    int device;
    if (check_placement(kernel, ops, count, &device) < 0) return -1;
    saved_context previous_device;
    if (enter_device(st, device, &previous_device) < 0) return -1;
    cudaError_t err;
    if (rung->device == FSG_DEVICE_CPU) {
        // Host work can take minutes: run in panels so that Ctrl-C stops it (csrc/interruptible.c).
        if (run_host_gemm_interruptible(rung, kernel->launch, &kernel->fill, a, b, c, out, (float)alpha, (float)beta,
                                        stream, &err) < 0) {
            leave_device(&previous_device);
            return -1;
        }
    } else {
        Py_BEGIN_ALLOW_THREADS
        err = fsg_run_gemm(rung, kernel->launch, &kernel->fill, a, b, c, out, (float)alpha, (float)beta, stream);
        Py_END_ALLOW_THREADS
    }
    leave_device(&previous_device);
    return err != cudaSuccess ? raise_kernel_error(st, kernel, err, "sgemm") : 0;
}

/* Whether the elements of a stack of `count` matrices m, `step` apart, are
 * all distinct, proved the simple way: with its dimensions in order of stride
 * size, each stride passes the span of the smaller ones. False may be a false
 * alarm (an interleaving that happens to miss), never a wrong yes. */
int stack_distinct(const fsg_matrix *m, int64_t count, int64_t step) {
    int64_t extent[3] = {m->rows, m->cols, count}, stride[3] = {m->rs, m->cs, step};
    for (int i = 0; i < 3; ++i) stride[i] = stride[i] < 0 ? -stride[i] : stride[i];
    for (int i = 1; i < 3; ++i)  // insertion sort by stride
        for (int j = i; j > 0 && stride[j] < stride[j - 1]; --j) {
            int64_t t = stride[j]; stride[j] = stride[j - 1]; stride[j - 1] = t;
            t = extent[j]; extent[j] = extent[j - 1]; extent[j - 1] = t;
        }
    int64_t span = 0;  // the largest offset the smaller dimensions reach
    for (int i = 0; i < 3; ++i) {
        if (extent[i] <= 1) continue;
        if (stride[i] <= span) return 0;
        if (__builtin_mul_overflow(extent[i] - 1, stride[i], &extent[i]) || __builtin_add_overflow(span, extent[i], &span))
            return 0;
    }
    return 1;
}

int refuse_stack_over_inputs(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, int64_t count,
                             const int64_t steps[3]) {
    const fsg_matrix *inputs[2] = {a, b};
    for (int i = 0; i < 2; ++i) {
        if (fsg_stacks_overlap(inputs[i], count, steps[i], out, count, steps[2])) {
            PyErr_Format(PyExc_ValueError, "out overlaps %s in a stack of products; compute into a new array",
                         i == 0 ? "A" : "B");
            return 1;
        }
    }
    return 0;
}

int run_batch(module_state *st, const kernel_choice *kernel, operand *ops, int64_t count, const int64_t steps[3],
              cudaStream_t stream) {
    const fsg_matrix *a = &ops[0].mat, *b = &ops[1].mat, *out = &ops[2].mat;
    if (kernel->rung->device == FSG_DEVICE_CUDA && refuse_in_forked_child(st) < 0) return -1;
    if (!shapes_agree(a, b, out, NULL)) return -1;
    if (count < 0) {
        PyErr_Format(PyExc_ValueError, "a stack of %lld products", (long long)count);
        return -1;
    }
    if (count == 0 || out->rows == 0 || out->cols == 0) return 0;
    if (refuse_overlapping_out(out)) return -1;
    if (refuse_stack_over_inputs(a, b, out, count, steps)) return -1;
    int device;
    if (check_placement(kernel, ops, 3, &device) < 0) return -1;
    if (a->side != FSG_DEVICE) {
        PyErr_SetString(PyExc_ValueError, "a stack of products in one call takes device operands");
        return -1;
    }
    saved_context previous_device;
    if (enter_device(st, device, &previous_device) < 0) return -1;
    cudaError_t err;
    Py_BEGIN_ALLOW_THREADS
    // A stack whose out may name an element twice runs product by product, in order, the last write winning.
    const bool in_order = !stack_distinct(out, count, steps[2]);
    err = fsg_run_batch(kernel->rung, kernel->launch, &kernel->fill, kernel->launch_batch, kernel->max_dim, in_order, a,
                        b, out, count,
                        steps[0], steps[1], steps[2], stream);
    Py_END_ALLOW_THREADS
    leave_device(&previous_device);
    return err != cudaSuccess ? raise_kernel_error(st, kernel, err, "sgemm") : 0;
}

cudaError_t order_streams(cudaStream_t consumer, cudaStream_t producer) {
    if (consumer == producer) return cudaSuccess;
    cudaEvent_t event;
    cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err == cudaSuccess) {
        err = cudaEventRecord(event, producer);
        if (err == cudaSuccess) err = cudaStreamWaitEvent(consumer, event, 0);
        cudaError_t destroyed = cudaEventDestroy(event);  // safe: the wait keeps what it needs
        if (err == cudaSuccess) err = destroyed;
    }
    return err;
}

/* ---- views_overlap: the one overlap test, for fastsgemm.matmul's Python ---- */

/* A view's extents and strides from two tuples of one length (at most 64). 0, or -1 with an exception set. */
static int view_of(PyObject *shape, PyObject *strides, int *ndim, int64_t extent[64], int64_t stride[64]) {
    if (!PyTuple_Check(shape) || !PyTuple_Check(strides) || PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(strides) ||
        PyTuple_GET_SIZE(shape) > 64) {
        PyErr_SetString(PyExc_TypeError, "views_overlap: shape and strides must be tuples of one length, at most 64");
        return -1;
    }
    *ndim = (int)PyTuple_GET_SIZE(shape);
    for (int i = 0; i < *ndim; ++i) {
        extent[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (extent[i] == -1 && PyErr_Occurred()) return -1;
        stride[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
        if (stride[i] == -1 && PyErr_Occurred()) return -1;
        if (extent[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "views_overlap: a negative extent");
            return -1;
        }
    }
    return 0;
}

/* views_overlap(x_ptr, x_shape, x_strides, y_ptr, y_shape, y_strides) -> bool: whether two device views (strides
 * in elements) name a common address, by operands.c's fsg_views_overlap. */
PyObject *views_overlap(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "views_overlap(x_ptr, x_shape, x_strides, y_ptr, y_shape, y_strides)");
        return NULL;
    }
    int64_t x_extent[64], x_stride[64], y_extent[64], y_stride[64];
    int x_ndim, y_ndim;
    const unsigned long long x = PyLong_AsUnsignedLongLong(args[0]);
    if (PyErr_Occurred()) return NULL;
    const unsigned long long y = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (view_of(args[1], args[2], &x_ndim, x_extent, x_stride) < 0 ||
        view_of(args[4], args[5], &y_ndim, y_extent, y_stride) < 0)
        return NULL;
    return PyBool_FromLong(fsg_views_overlap((uintptr_t)x, x_ndim, x_extent, x_stride, (uintptr_t)y, y_ndim, y_extent,
                                             y_stride));
}
