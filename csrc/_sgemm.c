/*
 * fastsgemm._sgemm: the C extension under the fastsgemm package.
 *
 * This file is the module: its table, its state, the DeviceBuffer and
 * DeviceMatrix types made from their specs, and the module's functions, which call down into the rest
 * and are called by none of it (tests/test_c_layers.py). Below it:
 * csrc/fast_call.c (sgemm and matmul read and run in one C call),
 * csrc/timing.c (the benchmark's timing harness), csrc/dlpack.c (the capsule
 * protocol), csrc/device_buffer.c (DeviceBuffer and its result pools, and
 * DeviceMatrix, DeviceArray's C base),
 * csrc/call.c (operands, kernel choice, one GEMM or a stack with the GIL
 * released), csrc/allocation.c (an operand's memory checked against its
 * allocation), csrc/device_context.c (the calling thread's CUDA context),
 * csrc/operands.c (layouts, staging, split K) and csrc/errors.c (CUDA
 * failures as Python exceptions). Argument normalisation and friendly
 * messages for users live in python/fastsgemm/.
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
    Py_VISIT(st->device_matrix);
    return fast_state_traverse(&st->fast, visit, arg);
}

static int module_clear(PyObject *module) {
    module_state *st = get_state(module);
    Py_CLEAR(st->cuda_error);
    Py_CLEAR(st->device_buffer);
    Py_CLEAR(st->device_matrix);
    fast_state_clear(&st->fast);
    return 0;
}

static void module_free(void *module) { module_clear((PyObject *)module); }

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

/* build_info() -> str: what setup.py built this module for, as JSON (the architectures with machine code, the one
 * whose PTX later GPUs compile, and why those), or "" for a build that did not say. */
#ifndef FSG_BUILD_INFO
#define FSG_BUILD_INFO ""
#endif
static PyObject *build_info(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyUnicode_FromString(FSG_BUILD_INFO);
}

/* ---- the registry ---- */

/* ladder.h's fsg_fill as Python sees it: (tile_m, tile_n, blocks_per_sm, short_slice, whole_k), or None when left
 * zero. */
static PyObject *fill_tuple(const fsg_fill *fill) {
    if (fill->tile_m == 0) Py_RETURN_NONE;
    return Py_BuildValue("(iiiiO)", fill->tile_m, fill->tile_n, fill->blocks_per_sm, fill->short_slice,
                         fill->whole_k ? Py_True : Py_False);
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
            PyObject *config = Py_BuildValue("(ssLNOssz)", c->name, c->shape, (long long)c->max_dim, fill_tuple(&c->fill),
                                             c->launch_batch != NULL ? Py_True : Py_False,
                                             c->precision != NULL ? c->precision : r->precision,
                                             c->source != NULL ? c->source : r->source,
                                             c->not_for_auto != NULL ? c->not_for_auto : r->not_for_auto);
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
        if (err == cudaSuccess) err = result_pool_follow_limit(d);
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
    {"linear_fast", (PyCFunction)(void (*)(void))linear_fast, METH_FASTCALL,
     "linear_fast(input, weight, bias, kernel): fastsgemm.torch.Linear's input @ weight^T + bias on torch CUDA "
     "tensors in one C call (the bias as the product's C) -> a new tensor, or NotImplemented where Python must run"},
    {"views_overlap", (PyCFunction)(void (*)(void))views_overlap, METH_FASTCALL,
     "views_overlap(x_ptr, x_shape, x_strides, y_ptr, y_shape, y_strides) -> bool: whether two device views share "
     "an address"},
    {"read_device", (PyCFunction)(void (*)(void))read_device, METH_FASTCALL,
     "read_device(obj, max_rank) -> (ptr, shape, strides, device, stream), or None: the fast path's reader of "
     "torch tensors, CuPy arrays and DeviceArrays"},
    {"stream_for", (PyCFunction)(void (*)(void))stream_for, METH_FASTCALL,
     "stream_for(A, device, producer_stream) -> int: the stream a call whose A is this object works on"},
    {"result_like", (PyCFunction)(void (*)(void))result_like, METH_FASTCALL,
     "result_like(A, shape, device, stream) -> a new float32 result for a call whose A is this object"},
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
     "rungs() -> the registry, in ladder order, as a list of dicts; configs: (name, shape, max_dim, fill, batched, "
     "precision, source, not_for_auto) tuples"},
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
    {"build_info", build_info, METH_NOARGS, "build_info() -> JSON: the GPU architectures this module was built for"},
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
    st->device_buffer = (PyTypeObject *)PyType_FromModuleAndSpec(module, &device_buffer_spec, NULL);
    if (st->device_buffer == NULL || PyModule_AddType(module, st->device_buffer) < 0) return -1;
    st->device_matrix = (PyTypeObject *)PyType_FromModuleAndSpec(module, &device_matrix_spec, NULL);
    if (st->device_matrix == NULL || PyModule_AddType(module, st->device_matrix) < 0) return -1;
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
