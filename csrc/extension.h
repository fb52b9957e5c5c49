/*
 * extension.h: what the files of the C extension share: the module state,
 * the operand and kernel structs, and the helpers that turn CUDA failures into
 * Python exceptions and run one GEMM with the GIL released.
 *
 * csrc/_sgemm.c is the module and calls down into the others; none calls up
 * into it, and no two call each other (tests/test_c_layers.py). The helpers
 * declared here live in csrc/call.c (operands, kernels, running a GEMM),
 * csrc/errors.c, csrc/device_context.c, csrc/allocation.c and
 * csrc/device_buffer.c; csrc/fast_call.c holds the per-call fast path
 * (sgemm on torch, CuPy, DeviceArray and NumPy operands read in C),
 * csrc/dlpack.c the DLPack capsule protocol and csrc/timing.c the
 * benchmark's timing harness.
 */
#ifndef FASTSGEMM_EXTENSION_H
#define FASTSGEMM_EXTENSION_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "operands.h"
#include "support/device_memory.h"

/* ---- the fast path's state (csrc/fast_call.c) ---- */

/* One remembered choice of kernel="auto": (device, m, n, k, count) -> kernel. */
typedef struct auto_slot {
    int64_t m, n, k;
    int64_t count; /* products in the stack (1: one product) */
    int device; /* -1: empty slot */
    int rung, config;
} auto_slot;

enum { kAutoSlots = 512 };

typedef struct fast_state {
    /* Set once by the package at import (register_fast_path). */
    PyObject *ndarray_type;      /* numpy.ndarray */
    PyObject *numpy_empty;       /* numpy.empty */
    PyObject *float32_dtype;     /* numpy.dtype("float32") */
    PyObject *device_array_type; /* fastsgemm.DeviceArray */
    PyObject *auto_chooser;      /* (device, m, n, k, count) -> (rung index, config index) */
    /* Found in sys.modules when the framework has been imported by the user;
     * fastsgemm never imports torch or CuPy itself. */
    PyObject *torch_tensor_type, *torch_float32, *torch_raw_stream, *torch_is_grad_enabled;
    PyObject *cupy_ndarray_type, *cupy_empty, *cupy_current_stream;
    /* Interned attribute names. */
    PyObject *s_requires_grad;
    PyObject *s_dtype, *s_shape, *s_stride, *s_strides, *s_data_ptr, *s_get_device, *s_is_cuda, *s_data, *s_ptr,
        *s_device_id, *s_new_empty;
    int cuda_devices; /* cudaGetDeviceCount, -1 until asked */
    auto_slot auto_cache[kAutoSlots];
} fast_state;

typedef struct module_state {
    PyObject *cuda_error;        /* fastsgemm.CudaError, a RuntimeError */
    PyTypeObject *device_buffer; /* fastsgemm._sgemm.DeviceBuffer */
    PyTypeObject *device_matrix; /* fastsgemm._sgemm.DeviceMatrix, fastsgemm.DeviceArray's base */
    fast_state fast;
} module_state;

static inline module_state *get_state(PyObject *module) { return (module_state *)PyModule_GetState(module); }

/* DeviceBuffer's instance layout, read directly by the fast path. */
typedef struct DeviceBuffer {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t nbytes;
    int device;
    int pooled; /* from the stream-ordered result pool (csrc/device_buffer.c), not cudaMalloc */
    int shared; /* its address went out (an interface, DLPack, .ptr) or a stream outside the legacy stream's order
                   read it: freed only after the device has synchronized */
    int counted; /* its bytes are in fastsgemm's device memory count (kernels/support/device_memory.c) */
} DeviceBuffer;

/* What a fastsgemm.DeviceArray is to the C: the instance layout of its base type, DeviceMatrix. The fast path
 * reads these fields, not the Python class's attributes. Set together by DeviceMatrix._bind, which checks that the
 * shape fits the buffer; buffer and shape cannot change otherwise. */
typedef struct DeviceMatrix {
    PyObject_HEAD
    PyObject *buffer;   /* a DeviceBuffer; NULL until _bind */
    int64_t rows, cols; /* row-major, rows * cols * 4 <= the buffer's nbytes */
    PyObject *stream;   /* the stream of its last write (an int handle), or NULL for none */
    PyObject *weakrefs;
} DeviceMatrix;

/* csrc/device_buffer.c: the types' specs, and what a device memory limit asks of the result pools (what one
 * keeps between calls stays within the limit). */
extern PyType_Spec device_buffer_spec;
extern PyType_Spec device_matrix_spec;
cudaError_t result_pool_follow_limit(int device);

/* Marks a pooled buffer as read on `stream`: one the legacy default stream does not order (a non-blocking
 * stream) makes its free wait for the whole device (csrc/device_buffer.c, "DeviceBuffer"). */
void device_buffer_read_on(DeviceBuffer *buffer, cudaStream_t stream);

/* ---- the calling thread's CUDA context (csrc/device_context.c) ---- */

/* A driver API function by name, through the runtime's entry-point query (no link to the driver), or NULL. */
void *driver_function(const char *name);

/* What enter_device found on the calling thread, for leave_device to put back. */
typedef struct saved_context {
    void *context;      /* the thread's CUcontext before the call; NULL: none was current */
    int switched;       /* whether enter_device made another context current */
    int runtime_device; /* without the driver's entry points: the runtime's device to set back (-1: none) */
} saved_context;

/* Makes a context of `device` current on the calling thread, whatever thread it is and whether or not any
 * context is current there: the one already current if it is that device's, else the device's primary context.
 * device < 0 (host work): nothing, also in a forked child. Returns 0, or -1 with CudaError set (in a child forked
 * after CUDA was initialized, for any device). */
int enter_device(module_state *st, int device, saved_context *saved);
/* enter_device with no exception: cudaSuccess or the error (for deallocators, which must not raise). */
cudaError_t switch_device(int device, saved_context *saved);
/* Puts back the context enter_device found (none, where none was current). */
void leave_device(const saved_context *saved);

/* Whether the CUDA driver is loaded and initialized in this process; initializes nothing (asked before a fork). */
int cuda_initialized(void);
/* The CUDA version the driver supports (e.g. 13000), 0 where there is no driver; initializes nothing. */
int driver_version(void);
/* Called in a child forked after CUDA was initialized: from then on the module refuses every CUDA call. */
void mark_forked_after_cuda(void);
int forked_child(void);
/* 0, or -1 with CudaError saying why CUDA cannot be used in a forked child and what to do instead. */
int refuse_in_forked_child(module_state *st);

/* ---- operands and kernels ---- */

typedef struct operand {
    fsg_matrix mat;
    Py_buffer view; /* held for the whole call when the operand is host memory */
    int has_view;
    int device; /* CUDA device ordinal of device memory, -1 for host memory */
} operand;

/* Reads one operand as the private interface passes it: a device tuple
 * (pointer, rows, cols, row_stride, col_stride) or a host buffer of float32.
 * Returns -1 with an exception set when it is neither. */
int parse_operand(module_state *st, PyObject *obj, const char *name, int writable, operand *op);
void release_operand(operand *op);

/* Checks a device operand before any work touches it (csrc/allocation.c): its
 * pointer is 4-byte aligned device or managed memory, and every byte its
 * shape and strides name lies inside the allocation the pointer belongs to.
 * Sets *device to the allocation's device. Returns 0, or -1 with ValueError
 * (naming the operand, the span it claims and the allocation's size) or
 * CudaError set. Matrices with no elements must not be passed. */
int check_device_operand(module_state *st, const fsg_matrix *m, const char *name, int *device);

/* check_device_operand for a stack of `count` matrices m, product p's at
 * m->ptr + p * step elements (any sign): every byte of every matrix must lie
 * in the one allocation. */
int check_device_stack(module_state *st, const fsg_matrix *m, int64_t count, int64_t step, const char *name,
                       int *device);

/* Later work on `consumer` waits for the work queued so far on `producer`
 * (nothing to do when they are one stream). */
cudaError_t order_streams(cudaStream_t consumer, cudaStream_t producer);

typedef struct kernel_choice {
    const fsg_rung *rung;
    fsg_launcher launch;
    int64_t max_dim;
    fsg_batch_launcher launch_batch; /* runs a stack of products in one launch (NULL: product by product) */
    fsg_fill fill;                   /* how the planner slices K for it (ladder.h) */
    char name[96]; /* "rung" or "rung:config", for messages */
} kernel_choice;

/* The kernel for a registry index and a configuration index (-1: the rung's
 * own launcher). Returns -1 with ValueError set for indices out of range. */
int choose_kernel(long index, long config, kernel_choice *choice);

/* Reads a kernel as Python passes it: a registry index (the rung's own
 * launcher) or a (registry index, configuration index) pair. Returns -1 with
 * an exception set for anything else. */
int parse_kernel(PyObject *obj, kernel_choice *choice);

/* Reads a stream handle as Python passes it: an integer, or None for the
 * calling thread's per-thread default stream. */
int stream_from_object(PyObject *obj, cudaStream_t *stream);

/* Raises the Python exception for a CUDA error met while doing `what`
 * (MemoryError for allocation failures, fastsgemm.CudaError otherwise).
 * Always returns NULL. */
PyObject *raise_cuda_error(module_state *st, cudaError_t err, const char *what);
/* The exception for a rung's CUDA error while `doing` it ("sgemm", "timing"); for the cuBLAS rungs, why cuBLAS
 * could not be opened and how to get it. Returns -1. */
int raise_kernel_error(module_state *st, const kernel_choice *kernel, cudaError_t err, const char *doing);

/* Checks that the operands (a, b, out and, when count == 4, c) agree and run
 * out = alpha * a @ b + beta * c with the kernel on `stream`, the GIL
 * released, on the operands' device. Returns 0, or -1 with an exception set. */
int run_gemm(module_state *st, const kernel_choice *kernel, operand *ops, int count, double alpha, double beta,
             cudaStream_t stream);

/* Whether out = A B (+ C) agrees in shape; 0 with ValueError naming the shapes when not. */
int shapes_agree(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, const fsg_matrix *c);

/* A stack of `count` products out_p = a_p @ b_p on device operands (ops: a,
 * b, out; each operand's matrices steps[i] elements apart), through
 * fsg_run_batch: one launch for a batched kernel. Checks the shapes, that
 * each of out's matrices names distinct elements (an out whose matrices may
 * share some runs product by product, in order), that out misses A and B,
 * and the placement; the
 * stacks' extents must already be checked (check_device_stack). Returns 0, or
 * -1 with an exception set. */
int run_batch(module_state *st, const kernel_choice *kernel, operand *ops, int64_t count, const int64_t steps[3],
              cudaStream_t stream);

/* 1 with ValueError when a stack's results reach memory its A's or B's do (steps: A's, B's, out's), else 0. */
int refuse_stack_over_inputs(const fsg_matrix *a, const fsg_matrix *b, const fsg_matrix *out, int64_t count,
                             const int64_t steps[3]);

/* Whether every element of a stack of `count` matrices m, `step` elements
 * apart, is distinct, proved the simple way (a false "no" is possible, never
 * a false "yes"). */
int stack_distinct(const fsg_matrix *m, int64_t count, int64_t step);

/* fsg_run_gemm for a host (cpu) rung, called with the GIL held: in column
 * panels of out, each with the GIL released, Ctrl-C and other signals checked
 * between them (csrc/interruptible.c). Returns 0 with fsg_run_gemm's result in
 * *result, or -1 with the exception a signal handler raised set; out then holds
 * the result in the panels that finished and its old values elsewhere. */
int run_host_gemm_interruptible(const fsg_rung *rung, fsg_launcher launch, const fsg_fill *fill, const fsg_matrix *a,
                                const fsg_matrix *b, const fsg_matrix *c, const fsg_matrix *out, float alpha,
                                float beta, cudaStream_t stream, cudaError_t *result);

/* ---- the module's functions defined outside csrc/_sgemm.c ---- */

/* csrc/timing.c */
PyObject *time_gemm(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fill_uniform(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* csrc/dlpack.c */
PyObject *dlpack_import(PyObject *module, PyObject *capsule);
PyObject *dlpack_export(PyObject *module, PyObject *args);

/* ---- the fast path (csrc/fast_call.c) ---- */

int fast_state_init(fast_state *fs);
int fast_state_traverse(fast_state *fs, visitproc visit, void *arg);
void fast_state_clear(fast_state *fs);
PyObject *register_fast_path(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *sgemm_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *matmul_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *linear_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *stream_for(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *result_like(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *read_device(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* csrc/call.c */
PyObject *views_overlap(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *forget_auto_choices(PyObject *module, PyObject *unused);

/* kernel="auto" for a stack of `count` m x n x k products (1: one product)
 * on `device`: the registered chooser's answer, remembered. 0, or -1 with an
 * exception set. */
int auto_kernel(fast_state *fs, int device, int64_t m, int64_t n, int64_t k, int64_t count, kernel_choice *choice);

/* What auto is asked about for a stack (ops: a, b, out; run_batch's steps):
 * problem = {m, n, k, count}: the one product it is where fsg_batch_as_one
 * says so, and one product's shape with count 1 where fsg_run_batch will run
 * it product by product (K == 0, a layout neither row- nor column-major, an
 * out whose products may share elements), else the stack's. */
void auto_problem_of_stack(const operand ops[3], int64_t count, const int64_t steps[3], int64_t problem[4]);

#endif /* FASTSGEMM_EXTENSION_H */
