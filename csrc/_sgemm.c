/*
 * fastsgemm._sgemm: the C extension under the fastsgemm package.
 *
 * It does what must touch memory or CUDA: validating and holding the
 * operands' memory, running a rung through csrc/operands.c with the GIL
 * released, device buffers, device queries, and turning every CUDA failure
 * into a Python exception. The DLPack capsule protocol is in csrc/dlpack.c,
 * the benchmark's timing harness in csrc/timing.c. Argument normalisation
 * and friendly messages for users live in python/fastsgemm/.
 *
 * Private interface: an operand is either an object exporting the buffer
 * protocol (host memory) or a tuple (pointer, rows, cols, row_stride,
 * col_stride) describing device memory, strides in elements.
 */
#include "extension.h"
#include "support/workspace_pool.h"

#include <cublas_v2.h>  // CUBLAS_VER_MAJOR (the wheel's cublas_api.h may only be included through it)
#include <structmember.h>
#include <limits.h>
#include <string.h>

/* ---- module state (extension.h) ---- */

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    module_state *st = get_state(module);
    Py_VISIT(st->cuda_error);
    Py_VISIT(st->device_buffer);
    return fast_state_traverse(&st->fast, visit, arg);
}

static int module_clear(PyObject *module) {
    module_state *st = get_state(module);
    Py_CLEAR(st->cuda_error);
    Py_CLEAR(st->device_buffer);
    fast_state_clear(&st->fast);
    return 0;
}

static void module_free(void *module) { module_clear((PyObject *)module); }

/* ---- errors ---- */

/* Errors after which the CUDA context is lost for good in this process. */
static int is_sticky(cudaError_t err) {
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: return 1;
    default: return 0;
    }
}

/* Raises the Python exception for a CUDA error met while doing `what`:
 * MemoryError for an allocation failure, CudaError (with .code and
 * .cuda_name) for everything else. Always returns NULL. */
PyObject *raise_cuda_error(module_state *st, cudaError_t err, const char *what) {
    const char *name = cudaGetErrorName(err), *text = cudaGetErrorString(err);
    if (err == cudaErrorMemoryAllocation) {
        char refusal[256];
        if (fsg_memory_refusal(refusal, sizeof refusal))  // the limit said no, not the driver
            PyErr_Format(PyExc_MemoryError, "fastsgemm: out of memory during %s: %s", what, refusal);
        else
            PyErr_Format(PyExc_MemoryError, "fastsgemm: out of memory during %s (%s: %s)", what, name, text);
        return NULL;
    }
    const char *hint = is_sticky(err) ? " This error is sticky: the CUDA context of this process is lost and "
                                        "every later CUDA call will fail; restart the Python process."
                                      : "";
    PyObject *msg = PyUnicode_FromFormat("CUDA error during %s: %s (%s, code %d).%s", what, text, name, (int)err, hint);
    if (msg == NULL) return NULL;
    PyObject *exc = PyObject_CallOneArg(st->cuda_error, msg);
    Py_DECREF(msg);
    if (exc == NULL) return NULL;
    PyObject *code = PyLong_FromLong((long)err), *cuda_name = PyUnicode_FromString(name);
    if (code != NULL && cuda_name != NULL && PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "cuda_name", cuda_name) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(code);
    Py_XDECREF(cuda_name);
    Py_DECREF(exc);
    return NULL;
}

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
        snprintf(choice->name, sizeof choice->name, "%s", rung->name);
    } else {
        choice->launch = rung->configs[config].launch;
        choice->max_dim = rung->configs[config].max_dim;
        choice->launch_batch = rung->configs[config].launch_batch;
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
        if (run_host_gemm_interruptible(rung, kernel->launch, a, b, c, out, (float)alpha, (float)beta, stream,
                                        &err) < 0) {
            leave_device(&previous_device);
            return -1;
        }
    } else {
        Py_BEGIN_ALLOW_THREADS
        err = fsg_run_gemm(rung, kernel->launch, a, b, c, out, (float)alpha, (float)beta, stream);
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

void stack_span(const fsg_matrix *m, int64_t count, int64_t step, int64_t *lo, int64_t *hi) {
    const int64_t reach[3] = {(m->rows - 1) * m->rs, (m->cols - 1) * m->cs, (count - 1) * step};
    *lo = *hi = (int64_t)(uintptr_t)m->ptr;
    for (int i = 0; i < 3; ++i) {
        if (reach[i] < 0) *lo += reach[i] * (int64_t)sizeof(float);
        else *hi += reach[i] * (int64_t)sizeof(float);
    }
    *hi += sizeof(float);
}

int refuse_stack_over_inputs(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, int64_t count,
                             const int64_t steps[3]) {
    int64_t out_lo, out_hi;
    stack_span(out, count, steps[2], &out_lo, &out_hi);
    const fsg_matrix *inputs[2] = {a, b};
    for (int i = 0; i < 2; ++i) {
        if (inputs[i]->rows == 0 || inputs[i]->cols == 0) continue;  // K == 0: names no memory
        int64_t lo, hi;
        stack_span(inputs[i], count, steps[i], &lo, &hi);
        if (lo < out_hi && out_lo < hi) {
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
    err = fsg_run_batch(kernel->rung, kernel->launch, kernel->launch_batch, kernel->max_dim, in_order, a, b, out, count,
                        steps[0], steps[1], steps[2], stream);
    Py_END_ALLOW_THREADS
    leave_device(&previous_device);
    return err != cudaSuccess ? raise_kernel_error(st, kernel, err, "sgemm") : 0;
}

/* ---- gemm(kernel, a, b, c, out, alpha, beta, stream) ---- */

static PyObject *gemm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "gemm(kernel, a, b, c, out, alpha, beta, stream) takes 8 arguments");
        return NULL;
    }
    PyObject *result = NULL;
    operand ops[4]; /* a, b, out, c */
    int parsed = 0;
    PyObject *objs[4] = {args[1], args[2], args[4], args[3]};
    // sgemm_raw's C is its output: one object passed as both, named as its caller knows it.
    const char *names[4] = {"A", "B", args[3] == args[4] ? "C" : "out", "C"};

    kernel_choice kernel;
    if (parse_kernel(args[0], &kernel) < 0) goto exit;
    const double alpha = PyFloat_AsDouble(args[5]);
    if (alpha == -1.0 && PyErr_Occurred()) goto exit;
    const double beta = PyFloat_AsDouble(args[6]);
    if (beta == -1.0 && PyErr_Occurred()) goto exit;
    cudaStream_t stream;
    if (stream_from_object(args[7], &stream) < 0) goto exit;

    const int count = objs[3] == Py_None ? 3 : 4;
    for (; parsed < count; ++parsed)
        if (parse_operand(st, objs[parsed], names[parsed], parsed == 2, &ops[parsed]) < 0) goto exit;
    if (run_gemm(st, &kernel, ops, count, alpha, beta, stream) < 0) goto exit;
    result = Py_NewRef(Py_None);

exit:
    for (int i = 0; i < parsed; ++i) release_operand(&ops[i]);
    return result;
}

/* ---- gemm_batch(kernel, a, b, out, count, step_a, step_b, step_out, stream) ---- */

static PyObject *gemm_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "gemm_batch(kernel, a, b, out, count, step_a, step_b, step_out, stream) takes 9 arguments");
        return NULL;
    }
    PyObject *result = NULL;
    operand ops[3];
    int parsed = 0;
    static const char *const names[3] = {"A", "B", "out"};
    kernel_choice kernel;
    int64_t count, steps[3];
    cudaStream_t stream;
    const bool automatic = args[0] == Py_None;  // kernel="auto": chosen once the stack is known
    if (!automatic && parse_kernel(args[0], &kernel) < 0) goto exit;
    count = PyLong_AsLongLong(args[4]);
    if (count == -1 && PyErr_Occurred()) goto exit;
    for (int i = 0; i < 3; ++i) {
        steps[i] = PyLong_AsLongLong(args[5 + i]);
        if (steps[i] == -1 && PyErr_Occurred()) goto exit;
    }
    if (stream_from_object(args[8], &stream) < 0) goto exit;
    for (; parsed < 3; ++parsed) {
        if (!PyTuple_Check(args[1 + parsed])) {
            PyErr_Format(PyExc_TypeError, "gemm_batch: %s must be a device tuple", names[parsed]);
            goto exit;
        }
        if (parse_operand(st, args[1 + parsed], names[parsed], parsed == 2, &ops[parsed]) < 0) goto exit;
    }
    for (int i = 0; i < 3; ++i)  // every matrix of the stack, not only the first, inside the allocation
        if (count > 1 && ops[i].mat.rows > 0 && ops[i].mat.cols > 0 &&
            check_device_stack(st, &ops[i].mat, count, steps[i], names[i], &ops[i].device) < 0)
            goto exit;
    if (automatic) {
        int64_t problem[4];
        auto_problem_of_stack(ops, count, steps, problem);
        int device = ops[0].device >= 0 ? ops[0].device : ops[1].device >= 0 ? ops[1].device : ops[2].device;
        if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {  // only empty operands: any device's choice
            cudaGetLastError();
            device = 0;
        }
        if (auto_kernel(&st->fast, device, problem[0], problem[1], problem[2], problem[3], &kernel) < 0) goto exit;
    }
    if (run_batch(st, &kernel, ops, count, steps, stream) < 0) goto exit;
    result = Py_NewRef(Py_None);
exit:
    for (int i = 0; i < parsed; ++i) release_operand(&ops[i]);
    return result;
}

/* ---- copy(dst, src, stream): dst = src between any two views ---- */

static PyObject *copy(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "copy(dst, src, stream) takes 3 arguments");
        return NULL;
    }
    PyObject *result = NULL;
    operand dst, src;
    int have_dst = 0, have_src = 0;
    saved_context previous_device = {NULL, 0, -1};
    cudaStream_t stream;
    if (stream_from_object(args[2], &stream) < 0) goto exit;
    if (parse_operand(st, args[0], "dst", 1, &dst) < 0) goto exit;
    have_dst = 1;
    if (parse_operand(st, args[1], "src", 0, &src) < 0) goto exit;
    have_src = 1;
    if (dst.mat.rows != src.mat.rows || dst.mat.cols != src.mat.cols) {
        PyErr_SetString(PyExc_ValueError, "copy: shapes differ");
        goto exit;
    }
    if (enter_device(st, dst.device >= 0 ? dst.device : src.device, &previous_device) < 0) goto exit;
    cudaError_t err;
    Py_BEGIN_ALLOW_THREADS
    err = fsg_copy(&dst.mat, &src.mat, stream);
    Py_END_ALLOW_THREADS
    if (err != cudaSuccess) {
        raise_cuda_error(st, err, "a matrix copy");
        goto exit;
    }
    result = Py_NewRef(Py_None);
exit:
    leave_device(&previous_device);
    if (have_src) release_operand(&src);
    if (have_dst) release_operand(&dst);
    return result;
}

/* release_thread_resources(): frees what this thread holds (its cuBLAS handle). */
static PyObject *release_thread_resources(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    if (!forked_child()) fsg_cublas_release_thread_handle();  // a forked child's handle is its parent's
    Py_RETURN_NONE;
}

/* cuda_initialized(): whether the CUDA driver is initialized in this process, asked without initializing it. */
static PyObject *cuda_initialized_py(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyBool_FromLong(cuda_initialized());
}

/* mark_forked(): this process is a child forked after CUDA was initialized; every CUDA call is refused from now. */
static PyObject *mark_forked(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    mark_forked_after_cuda();
    Py_RETURN_NONE;
}

/* set_cublas_search_dirs(dirs): directories (a tuple of str) to look for cuBLAS in before the dynamic loader's own
 * search, from the package (the nvidia-cublas wheel's); only the first load reads them. */
static PyObject *set_cublas_search_dirs(PyObject *module, PyObject *dirs) {
    (void)module;
    if (!PyTuple_Check(dirs)) {
        PyErr_SetString(PyExc_TypeError, "set_cublas_search_dirs takes a tuple of str");
        return NULL;
    }
    enum { kMax = 8 };
    PyObject *encoded[kMax] = {NULL};  // each path as the file system spells it (bytes)
    const char *paths[kMax] = {NULL};
    const Py_ssize_t count = PyTuple_GET_SIZE(dirs) < kMax ? PyTuple_GET_SIZE(dirs) : kMax;
    int status = 0;
    for (Py_ssize_t i = 0; i < count && status == 0; ++i) {
        if (!PyUnicode_FSConverter(PyTuple_GET_ITEM(dirs, i), &encoded[i])) status = -1;
        else paths[i] = PyBytes_AS_STRING(encoded[i]);
    }
    if (status == 0 && fsg_cublas_search_dirs(paths, (int)count) < 0) {
        PyErr_NoMemory();
        status = -1;
    }
    for (Py_ssize_t i = 0; i < count; ++i) Py_XDECREF(encoded[i]);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* cublas_library() -> the path of the cuBLAS library in use, opening it first if need be (no GPU needed);
 * CudaError saying why where it cannot be opened. */
static PyObject *cublas_library(PyObject *module, PyObject *unused) {
    (void)unused;
    const char *path;
    Py_BEGIN_ALLOW_THREADS
    path = fsg_cublas_library();
    Py_END_ALLOW_THREADS
    if (path != NULL) return PyUnicode_DecodeFSDefault(path);
    char what[1200];
    snprintf(what, sizeof what, "opening cuBLAS (%s)", fsg_cublas_load_failure());
    return raise_cuda_error(get_state(module), cudaErrorSharedObjectInitFailed, what);
}

/* cuda_versions() -> (driver, runtime): the driver's CUDA version (0 where there is no driver) and the CUDA runtime
 * this module was built with (CUDART_VERSION, e.g. 13000), without touching a device or initializing CUDA. */
static PyObject *cuda_versions(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("(ii)", driver_version(), (int)CUDART_VERSION);
}

/* ---- the registry ---- */

/* ladder.h's fsg_fill as Python sees it: (tile_m, tile_n, blocks_per_sm), or None when left zero. */
static PyObject *fill_tuple(const fsg_fill *fill) {
    if (fill->tile_m == 0) Py_RETURN_NONE;
    return Py_BuildValue("(iii)", fill->tile_m, fill->tile_n, fill->blocks_per_sm);
}

static PyObject *rungs(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    PyObject *list = PyList_New(fsg_rung_count);
    if (list == NULL) return NULL;
    for (int i = 0; i < fsg_rung_count; ++i) {
        const fsg_rung *r = &fsg_rungs[i];
        PyObject *configs = PyTuple_New(r->config_count);
        for (int j = 0; configs != NULL && j < r->config_count; ++j) {
            const fsg_config *c = &r->configs[j];
            PyObject *config = Py_BuildValue("(ssLNOs)", c->name, c->shape, (long long)c->max_dim, fill_tuple(&c->fill),
                                             c->launch_batch != NULL ? Py_True : Py_False,
                                             c->precision != NULL ? c->precision : r->precision);
            if (config == NULL) Py_CLEAR(configs);
            else PyTuple_SET_ITEM(configs, j, config);
        }
        PyObject *item = configs == NULL ? NULL
                       : Py_BuildValue("{s:i,s:s,s:s,s:s,s:s,s:L,s:s,s:s,s:N,s:N,s:O,s:z}", "number", r->number, "name",
                                       r->name, "idea", r->idea, "device", r->device == FSG_DEVICE_CUDA ? "cuda" : "cpu",
                                       "source", r->source, "max_dim", (long long)r->max_dim, "sass", r->sass,
                                       "precision", r->precision, "fill", fill_tuple(&r->fill), "configs", configs,
                                       "batched", r->launch_batch != NULL ? Py_True : Py_False, "not_for_auto",
                                       r->not_for_auto);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* ---- devices and streams ---- */

static PyObject *device_count(PyObject *module, PyObject *unused) {
    (void)unused;
    if (refuse_in_forked_child(get_state(module)) < 0) return NULL;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return raise_cuda_error(get_state(module), err, "cudaGetDeviceCount");
    }
    return PyLong_FromLong(count);
}

static PyObject *current_device(PyObject *module, PyObject *unused) {
    (void)unused;
    if (refuse_in_forked_child(get_state(module)) < 0) return NULL;
    int device;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return raise_cuda_error(get_state(module), err, "cudaGetDevice");
    return PyLong_FromLong(device);
}

/* pointer_device(address) -> the ordinal of the device that owns it. */
static PyObject *pointer_device(PyObject *module, PyObject *arg) {
    void *p = PyLong_AsVoidPtr(arg);
    if (p == NULL && PyErr_Occurred()) return NULL;
    int device;
    const fsg_matrix one = {.ptr = p, .rows = 1, .cols = 1, .rs = 1, .cs = 1, .side = FSG_DEVICE};
    if (check_device_operand(get_state(module), &one, "pointer", &device) < 0) return NULL;
    return PyLong_FromLong(device);
}

static PyObject *device_info(PyObject *module, PyObject *arg) {
    module_state *st = get_state(module);
    const int device = (int)PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    if (refuse_in_forked_child(st) < 0) return NULL;
    struct cudaDeviceProp p;
    int clock_khz = 0, memory_clock_khz = 0;
    cudaError_t err = cudaGetDeviceProperties(&p, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, device);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return raise_cuda_error(st, err, "a device query");
    }
    int driver = 0, runtime = 0;
    if (err == cudaSuccess) err = cudaDriverGetVersion(&driver);
    if (err == cudaSuccess) err = cudaRuntimeGetVersion(&runtime);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return raise_cuda_error(st, err, "a version query");
    }
    return Py_BuildValue("{s:i,s:s,s:i,s:(ii),s:i,s:i,s:i,s:K,s:i,s:n,s:i,s:i}", "device", device, "name", p.name,
                         "sm_count", p.multiProcessorCount, "compute_capability", p.major, p.minor, "sm_clock_mhz",
                         clock_khz / 1000, "memory_clock_mhz", memory_clock_khz / 1000, "memory_bus_bits",
                         p.memoryBusWidth, "total_memory_bytes", (unsigned long long)p.totalGlobalMem,
                         "l2_cache_bytes", p.l2CacheSize, "shared_memory_per_block_optin",
                         (Py_ssize_t)p.sharedMemPerBlockOptin, "driver_version", driver, "runtime_version", runtime);
}

/* The optional device argument of synchronize and stream_wait: None (or absent) for the thread's current one. */
static int optional_device(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t at, int *device) {
    *device = -1;
    if (nargs <= at || args[at] == Py_None) return 0;
    const long d = PyLong_AsLong(args[at]);
    if (d == -1 && PyErr_Occurred()) return -1;
    if (d < 0 || d > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "device %ld is not a CUDA device ordinal", d);
        return -1;
    }
    *device = (int)d;
    return 0;
}

/* synchronize(stream, device=None): waits for the stream's work. The legacy default stream (0) and the per-thread
 * one (None) are the device's own: `device` names it, where the thread's current device may be another GPU's. */
static PyObject *synchronize(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "synchronize(stream, device=None) takes 1 or 2 arguments");
        return NULL;
    }
    cudaStream_t stream;
    int device;
    if (stream_from_object(args[0], &stream) < 0 || optional_device(args, nargs, 1, &device) < 0) return NULL;
    if (refuse_in_forked_child(st) < 0) return NULL;
    saved_context previous;
    if (enter_device(st, device, &previous) < 0) return NULL;
    cudaError_t err;
    Py_BEGIN_ALLOW_THREADS
    err = cudaStreamSynchronize(stream);
    Py_END_ALLOW_THREADS
    leave_device(&previous);
    if (err != cudaSuccess) return raise_cuda_error(st, err, "cudaStreamSynchronize");
    Py_RETURN_NONE;
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

/* stream_capturing(stream) -> whether work queued on `stream` now would be
 * captured into a CUDA graph (also when the stream is the legacy default
 * stream and another stream's capture forbids touching it). */
static PyObject *stream_capturing(PyObject *module, PyObject *arg) {
    cudaStream_t stream;
    if (stream_from_object(arg, &stream) < 0) return NULL;
    if (refuse_in_forked_child(get_state(module)) < 0) return NULL;
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t err = cudaStreamIsCapturing(stream, &status);
    if (err == cudaErrorStreamCaptureImplicit) {
        cudaGetLastError();
        Py_RETURN_TRUE;
    }
    if (err != cudaSuccess) return raise_cuda_error(get_state(module), err, "cudaStreamIsCapturing");
    return PyBool_FromLong(status != cudaStreamCaptureStatusNone);
}

/* stream_wait(consumer, producer, device=None): later work on `consumer` waits for all work queued so far on
 * `producer`, without blocking the host; the event that links them is made on `device` (the streams' GPU). */
static PyObject *stream_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "stream_wait(consumer, producer, device=None) takes 2 or 3 arguments");
        return NULL;
    }
    cudaStream_t consumer, producer;
    int device;
    if (stream_from_object(args[0], &consumer) < 0 || stream_from_object(args[1], &producer) < 0 ||
        optional_device(args, nargs, 2, &device) < 0)
        return NULL;
    if (refuse_in_forked_child(st) < 0) return NULL;
    saved_context previous;
    if (enter_device(st, device, &previous) < 0) return NULL;
    cudaError_t err = order_streams(consumer, producer);
    leave_device(&previous);
    if (err != cudaSuccess) return raise_cuda_error(st, err, "ordering two streams");
    Py_RETURN_NONE;
}

/* ---- DeviceBuffer: device memory owned by a Python object ----
 *
 * Two kinds. DeviceBuffer(nbytes, device) is cudaMalloc'd and cudaFree'd:
 * the free waits for the whole device, so no work anywhere can still be
 * using it. A result the fast path makes on a stream the legacy default
 * stream orders (the legacy stream itself, the per-thread stream, or any
 * stream made without cudaStreamNonBlocking), outside a stream capture,
 * comes instead from a stream-ordered memory pool per device, and goes back
 * to it with cudaFreeAsync on the legacy default stream: ordered after all
 * work already queued on every such stream, with no synchronize and no
 * driver allocation per call (the pool keeps up to a 64th of the device's
 * memory between calls). What that order cannot see, a non-blocking stream
 * that fastsgemm read the buffer on, or any place its address went (the
 * array interfaces, DLPack, DeviceArray.ptr), marks it shared; a shared
 * buffer is freed after cudaDeviceSynchronize, as cudaFree would. */

static cudaMemPool_t result_pools[64];  /* by device ordinal; guarded by the GIL */
static uint64_t result_pool_keeps[64];  /* what each keeps between calls without a device memory limit */
static char result_pool_failed[64];     /* made once and failed: cudaMalloc from then on */

/* Under a device memory limit a result pool keeps at most the limit between calls (as the workspace pools). */
static uint64_t result_pool_keeps_now(int device) {
    const uint64_t limit = fsg_memory_limit(device);
    return limit < result_pool_keeps[device] ? limit : result_pool_keeps[device];
}

/* Whether work queued on `stream` is ordered with the legacy default stream (both ways). */
static int ordered_with_legacy(cudaStream_t stream) {
    if (stream == (cudaStream_t)0 || stream == cudaStreamPerThread) return 1;
    unsigned flags;
    if (cudaStreamGetFlags(stream, &flags) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return (flags & cudaStreamNonBlocking) == 0;
}

/* Whether `stream` is being captured into a CUDA graph (an error counts as yes). */
static int capturing(cudaStream_t stream) {
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return capture != cudaStreamCaptureStatusNone;
}

void device_buffer_read_on(DeviceBuffer *buffer, cudaStream_t stream) {
    // A captured read runs whenever, and on whatever stream, the graph is launched.
    // Whether it is capturing is asked first: cudaStreamGetFlags is not for a stream under capture.
    if (buffer->pooled && !buffer->shared && (capturing(stream) || !ordered_with_legacy(stream))) buffer->shared = 1;
}

/* Device memory from `device`'s result pool in stream order on `stream`, or
 * cudaErrorNotSupported when the pool cannot be used for it (the caller then
 * takes cudaMalloc): no pool, a stream outside the legacy stream's order, or
 * a stream being captured. */
static cudaError_t pool_allocate(int device, cudaStream_t stream, size_t nbytes, void **ptr) {
    if (device < 0 || device >= (int)(sizeof result_pools / sizeof result_pools[0]) || result_pool_failed[device] ||
        capturing(stream) || !ordered_with_legacy(stream))
        return cudaErrorNotSupported;
    if (result_pools[device] == NULL) {
        size_t free_bytes, total_bytes;
        struct cudaMemPoolProps props = {0};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        cudaMemPool_t pool;
        cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
        if (err == cudaSuccess) err = cudaMemPoolCreate(&pool, &props);
        if (err != cudaSuccess) {
            cudaGetLastError();
            result_pool_failed[device] = 1;
            return cudaErrorNotSupported;
        }
        result_pool_keeps[device] = total_bytes / 64;
        uint64_t keep = result_pool_keeps_now(device);
        if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
            cudaGetLastError();
            (void)cudaMemPoolDestroy(pool);
            result_pool_failed[device] = 1;
            return cudaErrorNotSupported;
        }
        result_pools[device] = pool;
    }
    return cudaMallocFromPoolAsync(ptr, nbytes, result_pools[device], stream);
}

static PyObject *DeviceBuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Py_ssize_t nbytes;
    int device;
    PyObject *stream_obj = Py_None;
    static char *keywords[] = {"nbytes", "device", "stream", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ni|O:DeviceBuffer", keywords, &nbytes, &device, &stream_obj))
        return NULL;
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "DeviceBuffer: nbytes must be >= 0");
        return NULL;
    }
    cudaStream_t stream = 0;
    const int stream_ordered = stream_obj != Py_None;
    if (stream_ordered && stream_from_object(stream_obj, &stream) < 0) return NULL;
    module_state *st = PyType_GetModuleState(type);
    if (st == NULL) return NULL;
    DeviceBuffer *self = (DeviceBuffer *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->device = device;
    self->nbytes = nbytes;
    if (nbytes == 0) return (PyObject *)self;

    saved_context previous;
    if (enter_device(st, device, &previous) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    cudaError_t err = fsg_memory_take(device, (uint64_t)nbytes);
    if (err != cudaSuccess) {
        leave_device(&previous);
        Py_DECREF(self);  // ptr is NULL: nothing is given back
        return raise_cuda_error(st, err, "a DeviceBuffer's allocation");
    }
    self->counted = 1;
    err = cudaErrorNotSupported;
    if (stream_ordered) {
        err = pool_allocate(device, stream, (size_t)nbytes, &self->ptr);
        if (err != cudaSuccess) cudaGetLastError();  // not sticky (out of memory, say): cudaMalloc may still work
        self->pooled = err == cudaSuccess;
    }
    if (!self->pooled) {
        Py_BEGIN_ALLOW_THREADS
        err = cudaMalloc(&self->ptr, (size_t)nbytes);
        Py_END_ALLOW_THREADS
    }
    leave_device(&previous);
    if (err != cudaSuccess) {
        cudaGetLastError();
        self->ptr = NULL;
        Py_DECREF(self);  // gives the counted bytes back
        return raise_cuda_error(st, err, "cudaMalloc");
    }
    return (PyObject *)self;
}

static void DeviceBuffer_dealloc(DeviceBuffer *self) {
    PyTypeObject *type = Py_TYPE(self);
    if (self->ptr != NULL && forked_child()) {
        // The parent's memory, which this child cannot reach: left to the parent, uncounted here.
        if (self->counted) fsg_memory_give(self->device, (uint64_t)self->nbytes);
    } else if (self->ptr != NULL) {
        saved_context previous;
        const int on_device = switch_device(self->device, &previous) == cudaSuccess;
        // Nobody is left to tell of a failure here, so errors are cleared, never raised.
        cudaError_t err;
        if (!self->pooled) {
            err = cudaFree(self->ptr);  // waits for work still using the memory
        } else if (!on_device) {
            err = cudaErrorInvalidDevice;  // no legacy stream of its device to order the free on: left allocated
        } else if (self->shared && (err = cudaDeviceSynchronize()) != cudaSuccess) {
            // Work that may still read it could not be waited for (a capture forbids it, say): left allocated.
        } else {
            // On the legacy default stream: after all work queued so far on the streams it orders.
            err = cudaFreeAsync(self->ptr, (cudaStream_t)0);
        }
        if (err != cudaSuccess) cudaGetLastError();
        else if (self->counted) fsg_memory_give(self->device, (uint64_t)self->nbytes);  // what stays allocated stays counted
        leave_device(&previous);
    } else if (self->counted) {  // its allocation failed
        fsg_memory_give(self->device, (uint64_t)self->nbytes);
    }
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* share(): its address is going somewhere fastsgemm cannot follow. */
static PyObject *DeviceBuffer_share(DeviceBuffer *self, PyObject *unused) {
    (void)unused;
    self->shared = 1;
    Py_RETURN_NONE;
}

static PyObject *DeviceBuffer_pooled(DeviceBuffer *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->pooled);
}

static PyObject *DeviceBuffer_shared(DeviceBuffer *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->shared);
}

static PyObject *DeviceBuffer_ptr(DeviceBuffer *self, void *closure) {
    (void)closure;
    return PyLong_FromVoidPtr(self->ptr);
}

static PyMemberDef DeviceBuffer_members[] = {
    {"nbytes", T_PYSSIZET, offsetof(DeviceBuffer, nbytes), READONLY, "size in bytes"},
    {"device", T_INT, offsetof(DeviceBuffer, device), READONLY, "CUDA device ordinal"},
    {NULL},
};

static PyGetSetDef DeviceBuffer_getset[] = {
    {"ptr", (getter)DeviceBuffer_ptr, NULL, "device address (0 when empty)", NULL},
    {"pooled", (getter)DeviceBuffer_pooled, NULL, "from the stream-ordered result pool, not cudaMalloc", NULL},
    {"shared", (getter)DeviceBuffer_shared, NULL, "freed only after a device synchronize", NULL},
    {NULL},
};

static PyMethodDef DeviceBuffer_methods[] = {
    {"share", (PyCFunction)DeviceBuffer_share, METH_NOARGS,
     "share(): its address leaves fastsgemm's sight; it will be freed after a device synchronize"},
    {NULL},
};

static PyType_Slot DeviceBuffer_slots[] = {
    {Py_tp_new, DeviceBuffer_new},
    {Py_tp_dealloc, DeviceBuffer_dealloc},
    {Py_tp_members, DeviceBuffer_members},
    {Py_tp_getset, DeviceBuffer_getset},
    {Py_tp_methods, DeviceBuffer_methods},
    {Py_tp_doc, "DeviceBuffer(nbytes, device, stream=None): device memory freed with the object; from cudaMalloc, "
                "or with a stream the legacy default stream orders, from a stream-ordered pool."},
    {0, NULL},
};

static PyType_Spec DeviceBuffer_spec = {
    .name = "fastsgemm._sgemm.DeviceBuffer",
    .basicsize = sizeof(DeviceBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = DeviceBuffer_slots,
};

/* ---- module ---- */

/* ---- fastsgemm's own device memory: counts and limit (kernels/support/device_memory.c) ---- */

static int memory_device_arg(PyObject *arg, int *device) {
    const long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred()) return -1;
    if (d < -1 || d >= FSG_MAX_COUNTED_DEVICES) {
        PyErr_Format(PyExc_ValueError, "device %ld is not counted (ordinals 0 to %d)", d, FSG_MAX_COUNTED_DEVICES - 1);
        return -1;
    }
    *device = (int)d;
    return 0;
}

/* set_device_memory_limit(device, limit): limit in bytes or None; device -1 for every device. */
static PyObject *set_device_memory_limit(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    int device;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_device_memory_limit(device, limit) takes 2 arguments");
        return NULL;
    }
    if (memory_device_arg(args[0], &device) < 0) return NULL;
    uint64_t limit = FSG_NO_LIMIT;
    if (args[1] != Py_None) {
        const unsigned long long value = PyLong_AsUnsignedLongLong(args[1]);
        if (value == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        if (value >= FSG_NO_LIMIT) {
            PyErr_SetString(PyExc_OverflowError, "device memory limit too large");
            return NULL;
        }
        limit = value;
    }
    if (refuse_in_forked_child(get_state(module)) < 0) return NULL;  // its pools' locks may have been held at the fork
    fsg_memory_set_limit(device, limit);
    // The pools already made follow the limit: what they keep between calls stays within it.
    for (int d = 0; d < FSG_MAX_COUNTED_DEVICES; ++d) {
        if (device >= 0 && d != device) continue;
        cudaError_t err = fsg_workspace_pool_follow_limit(d);
        if (err == cudaSuccess && result_pools[d] != NULL) {
            uint64_t keep = result_pool_keeps_now(d);
            err = cudaMemPoolSetAttribute(result_pools[d], cudaMemPoolAttrReleaseThreshold, &keep);
        }
        if (err != cudaSuccess) {
            cudaGetLastError();
            return raise_cuda_error(get_state(module), err, "setting a memory pool's release threshold");
        }
    }
    Py_RETURN_NONE;
}

/* device_memory(device) -> (limit or None, in use, peak), in bytes. */
static PyObject *device_memory(PyObject *module, PyObject *arg) {
    (void)module;
    int device;
    if (memory_device_arg(arg, &device) < 0) return NULL;
    if (device < 0) {
        PyErr_SetString(PyExc_ValueError, "device_memory needs a device ordinal");
        return NULL;
    }
    uint64_t in_use, peak;
    fsg_memory_counts(device, &in_use, &peak);
    const uint64_t limit = fsg_memory_limit(device);
    if (limit == FSG_NO_LIMIT) return Py_BuildValue("(OKK)", Py_None, (unsigned long long)in_use, (unsigned long long)peak);
    return Py_BuildValue("(KKK)", (unsigned long long)limit, (unsigned long long)in_use, (unsigned long long)peak);
}

/* reset_device_memory_peak(device): the peak starts again from what is in use now. */
static PyObject *reset_device_memory_peak(PyObject *module, PyObject *arg) {
    (void)module;
    int device;
    if (memory_device_arg(arg, &device) < 0) return NULL;
    for (int d = 0; d < FSG_MAX_COUNTED_DEVICES; ++d)
        if (device < 0 || d == device) fsg_memory_reset_peak(d);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"gemm", (PyCFunction)(void (*)(void))gemm, METH_FASTCALL,
     "gemm(kernel, a, b, c, out, alpha, beta, stream): out = alpha * a @ b + beta * c with a registry rung number "
     "or (rung number, configuration number)"},
    {"gemm_batch", (PyCFunction)(void (*)(void))gemm_batch, METH_FASTCALL,
     "gemm_batch(kernel, a, b, out, count, step_a, step_b, step_out, stream): a stack of products out_p = a_p @ b_p, "
     "each operand's matrices step elements apart (device tuples); kernel None: auto"},
    {"matmul_fast", (PyCFunction)(void (*)(void))matmul_fast, METH_FASTCALL,
     "matmul_fast(A, B, out, kernel): fastsgemm.matmul on 2-D and 3-D torch tensors and CuPy arrays in one C call, "
     "or NotImplemented"},
    {"sgemm_fast", (PyCFunction)(void (*)(void))sgemm_fast, METH_FASTCALL,
     "sgemm_fast(A, B, C, out, alpha, beta, kernel) -> result, or NotImplemented where the general path must run"},
    {"register_fast_path", (PyCFunction)(void (*)(void))register_fast_path, METH_FASTCALL,
     "register_fast_path(numpy.ndarray, numpy.empty, float32 dtype, DeviceArray, auto_chooser): what the fast path needs"},
    {"forget_auto_choices", forget_auto_choices, METH_NOARGS,
     "forget_auto_choices(): empty the cache of kernel='auto' choices (after the tuning table changes)"},
    {"copy", (PyCFunction)(void (*)(void))copy, METH_FASTCALL, "copy(dst, src, stream): dst = src"},
    {"time_gemm", (PyCFunction)(void (*)(void))time_gemm, METH_FASTCALL,
     "time_gemm(kernel, sets, alpha, beta, warmup, repeats, stream) -> milliseconds of each timed run"},
    {"fill_uniform", (PyCFunction)(void (*)(void))fill_uniform, METH_FASTCALL,
     "fill_uniform(pointer, count, seed, stream): uniform [-1, 1) floats in device memory"},
    {"rungs", rungs, METH_NOARGS,
     "rungs() -> the registry, in ladder order, as a list of dicts; configs: (name, shape, max_dim) tuples"},
    {"cuda_initialized", cuda_initialized_py, METH_NOARGS,
     "cuda_initialized() -> whether the CUDA driver is initialized in this process (initializes nothing)"},
    {"mark_forked", mark_forked, METH_NOARGS,
     "mark_forked(): called in a child forked after CUDA was initialized; CUDA calls raise CudaError from then on"},
    {"release_thread_resources", release_thread_resources, METH_NOARGS,
     "release_thread_resources(): destroy the calling thread's cuBLAS handle, if any"},
    {"set_cublas_search_dirs", set_cublas_search_dirs, METH_O,
     "set_cublas_search_dirs(dirs): directories to look for cuBLAS in first (read at its first use)"},
    {"cublas_library", cublas_library, METH_NOARGS,
     "cublas_library() -> the path of the cuBLAS in use, opened first if need be; CudaError where it cannot be"},
    {"cuda_versions", cuda_versions, METH_NOARGS,
     "cuda_versions() -> (driver, runtime): the CUDA version the driver supports (0: no driver) and the one this "
     "module was built with"},
    {"device_count", device_count, METH_NOARGS, "device_count() -> number of CUDA devices; raises CudaError"},
    {"current_device", current_device, METH_NOARGS, "current_device() -> this thread's CUDA device ordinal"},
    {"set_device_memory_limit", (PyCFunction)(void (*)(void))set_device_memory_limit, METH_FASTCALL,
     "set_device_memory_limit(device, limit): cap fastsgemm's own device memory on device (-1: every device) at "
     "limit bytes (None: no cap)"},
    {"device_memory", device_memory, METH_O,
     "device_memory(device) -> (limit or None, in use, peak): fastsgemm's own device memory, in bytes"},
    {"reset_device_memory_peak", reset_device_memory_peak, METH_O,
     "reset_device_memory_peak(device): restart the peak from what is in use (-1: every device)"},
    {"pointer_device", pointer_device, METH_O, "pointer_device(address) -> CUDA device ordinal owning it"},
    {"device_info", device_info, METH_O, "device_info(ordinal) -> dict of device properties"},
    {"synchronize", (PyCFunction)(void (*)(void))synchronize, METH_FASTCALL,
     "synchronize(stream, device=None): wait for the stream's work (None: per-thread) on device (None: current)"},
    {"stream_capturing", stream_capturing, METH_O,
     "stream_capturing(stream) -> whether work queued on it now would be captured into a CUDA graph"},
    {"stream_wait", (PyCFunction)(void (*)(void))stream_wait, METH_FASTCALL,
     "stream_wait(consumer, producer, device=None): order consumer after producer's queued work, on device "
     "(None: the current one)"},
    {"dlpack_import", dlpack_import, METH_O, "dlpack_import(capsule) -> (holder, ptr, shape, strides, ...)"},
    {"dlpack_export", dlpack_export, METH_VARARGS, "dlpack_export(owner, ptr, rows, cols, rs, cs, ...) -> capsule"},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module) {
    module_state *st = get_state(module);
    st->cuda_error = PyErr_NewExceptionWithDoc(
        "fastsgemm.CudaError",
        "A CUDA call failed. The message is CUDA's own; .code and .cuda_name hold the cudaError_t.",
        PyExc_RuntimeError, NULL);
    if (st->cuda_error == NULL || PyModule_AddObjectRef(module, "CudaError", st->cuda_error) < 0) return -1;
    st->device_buffer = (PyTypeObject *)PyType_FromModuleAndSpec(module, &DeviceBuffer_spec, NULL);
    if (st->device_buffer == NULL || PyModule_AddType(module, st->device_buffer) < 0) return -1;
    return fast_state_init(&st->fast);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fastsgemm._sgemm",
    .m_doc = "The C core of fastsgemm: runs the SGEMM ladder's rungs on host or device memory.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__sgemm(void) { return PyModuleDef_Init(&module_def); }
