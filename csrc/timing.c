/*
 * The benchmark's timing harness (fastsgemm.benchmark and the command line
 * `python -m fastsgemm.bench`): time_gemm queues timed runs of one kernel
 * back to back between CUDA events, and fill_uniform makes the random device
 * operands it times on.
 */
#include "extension.h"

/* ---- time_gemm(kernel, sets, alpha, beta, warmup, repeats, stream) ---- */

/* Times `repeats` runs of one kernel (as gemm takes it) with CUDA events, one pair around each run,
 * all queued back to back so the GPU never waits for the host between them.
 * `sets` is a list of (a, b, c or None, out) device operands, used in turn
 * (rotating inputs keeps small problems from being timed out of L2). A set may
 * instead be a stack of products as gemm_batch runs it (fastsgemm.matmul's one
 * launch): (a, b, None, out, count, step_a, step_b, step_out), the steps in
 * elements; alpha must then be 1 and beta 0. Every set has the same form.
 * Returns the milliseconds of each run. */
PyObject *time_gemm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "time_gemm(kernel, sets, alpha, beta, warmup, repeats, stream) takes 7 arguments");
        return NULL;
    }
    if (refuse_in_forked_child(st) < 0) return NULL;
    kernel_choice kernel;
    if (parse_kernel(args[0], &kernel) < 0) return NULL;
    const double alpha = PyFloat_AsDouble(args[2]), beta = PyFloat_AsDouble(args[3]);
    const long warmup = PyLong_AsLong(args[4]), repeats = PyLong_AsLong(args[5]);
    cudaStream_t stream;
    if (PyErr_Occurred() || stream_from_object(args[6], &stream) < 0) return NULL;
    if (kernel.rung->device != FSG_DEVICE_CUDA) {
        PyErr_SetString(PyExc_ValueError, "time_gemm times CUDA rungs only");
        return NULL;
    }
    if (!PyList_Check(args[1]) || PyList_GET_SIZE(args[1]) < 1 || warmup < 0 || repeats < 1) {
        PyErr_SetString(PyExc_ValueError, "time_gemm needs a non-empty list of sets, warmup >= 0, repeats >= 1");
        return NULL;
    }
    // A tuple of the sets: strong references, so that an operand's __index__ cannot free a set being read.
    PyObject *set_tuple = PyList_AsTuple(args[1]);
    if (set_tuple == NULL) return NULL;
    const Py_ssize_t nsets = PyTuple_GET_SIZE(set_tuple);
    PyObject *result = NULL;
    fsg_matrix *mats = PyMem_Calloc((size_t)nsets * 4, sizeof(fsg_matrix));
    bool *has_c = PyMem_Calloc((size_t)nsets, sizeof(bool));
    int64_t *stacks = PyMem_Calloc((size_t)nsets * 4, sizeof(int64_t)); /* count and three steps; count 0: no stack */
    cudaEvent_t *events = PyMem_Calloc((size_t)repeats * 2, sizeof(cudaEvent_t));
    float *ms = PyMem_Calloc((size_t)repeats, sizeof(float));
    long created = 0;
    if (mats == NULL || has_c == NULL || stacks == NULL || events == NULL || ms == NULL) {
        PyErr_NoMemory();
        goto exit;
    }
    PyObject *first = PyTuple_GET_ITEM(set_tuple, 0);
    const bool stacked_sets = PyTuple_Check(first) && PyTuple_GET_SIZE(first) == 8;
    for (Py_ssize_t i = 0; i < nsets; ++i) {
        PyObject *set = PyTuple_GET_ITEM(set_tuple, i);
        const Py_ssize_t size = PyTuple_Check(set) ? PyTuple_GET_SIZE(set) : 0;
        const bool stack = size == 8;
        if ((size != 4 && !stack) || stack != stacked_sets ||
            (stack && (PyTuple_GET_ITEM(set, 2) != Py_None || alpha != 1.0 || beta != 0.0))) {
            PyErr_SetString(PyExc_ValueError, "each set is (a, b, c or None, out), or each is a stack (a, b, None, out, "
                                              "count, step_a, step_b, step_out) with alpha 1 and beta 0");
            goto exit;
        }
        for (int j = 0; j < 4; ++j) {
            PyObject *item = PyTuple_GET_ITEM(set, j);
            if (j == 2 && item == Py_None) continue;
            operand op;
            if (!PyTuple_Check(item)) {
                PyErr_SetString(PyExc_ValueError, "time_gemm takes device operands only");
                goto exit;
            }
            if (parse_operand(st, item, "operand", j == 3, &op) < 0) goto exit;
            mats[i * 4 + j] = op.mat;
            if (j == 2) has_c[i] = true;
        }
        if (!shapes_agree(&mats[i * 4], &mats[i * 4 + 1], &mats[i * 4 + 3], has_c[i] ? &mats[i * 4 + 2] : NULL))
            goto exit;
        if (beta != 0.0 && !has_c[i] && !stack) {
            PyErr_SetString(PyExc_ValueError, "beta != 0 needs a C matrix");
            goto exit;
        }
        for (int j = 0; stack && j < 4; ++j) {
            stacks[i * 4 + j] = PyLong_AsLongLong(PyTuple_GET_ITEM(set, 4 + j));
            if (stacks[i * 4 + j] == -1 && PyErr_Occurred()) goto exit;
        }
        if (stack && stacks[i * 4] < 1) {
            PyErr_SetString(PyExc_ValueError, "a timed stack has at least one product");
            goto exit;
        }
        static const char *const stacked[] = {"A", "B", "out"};
        for (int j = 0; stack && j < 3; ++j) {  // every matrix of the stack inside its allocation, as gemm_batch checks
            const fsg_matrix *m = &mats[i * 4 + (j == 2 ? 3 : j)];
            int device;
            if (m->rows > 0 && m->cols > 0 &&
                check_device_stack(st, m, stacks[i * 4], stacks[i * 4 + 1 + j], stacked[j], &device) < 0)
                goto exit;
        }
        if (stack && !stack_distinct(&mats[i * 4 + 3], stacks[i * 4], stacks[i * 4 + 3])) {
            PyErr_SetString(PyExc_ValueError, "a timed stack's results must not share elements");
            goto exit;
        }
        if (stack && refuse_stack_over_inputs(&mats[i * 4], &mats[i * 4 + 1], &mats[i * 4 + 3], stacks[i * 4],
                                              &stacks[i * 4 + 1]))
            goto exit;
    }
    cudaError_t err = cudaSuccess;
    Py_BEGIN_ALLOW_THREADS
    for (; created < 2 * repeats && err == cudaSuccess; ++created) err = cudaEventCreate(&events[created]);
    if (err != cudaSuccess) created--;  // the failed one was not made
    for (long r = 0; r < warmup + repeats && err == cudaSuccess; ++r) {
        const fsg_matrix *m = &mats[(r % nsets) * 4];
        const int64_t *stack = &stacks[(r % nsets) * 4];
        const long t = r - warmup;
        if (t >= 0) err = cudaEventRecord(events[2 * t], stream);
        if (err == cudaSuccess && stack[0] > 0)
            err = fsg_run_batch(kernel.rung, kernel.launch, &kernel.fill, kernel.launch_batch, kernel.max_dim, false,
                                &m[0], &m[1], &m[3], stack[0], stack[1], stack[2], stack[3], stream);
        else if (err == cudaSuccess)
            err = fsg_run_gemm(kernel.rung, kernel.launch, &kernel.fill, &m[0], &m[1], has_c[r % nsets] ? &m[2] : NULL,
                               &m[3], (float)alpha, (float)beta, stream);
        if (err == cudaSuccess && t >= 0) err = cudaEventRecord(events[2 * t + 1], stream);
    }
    if (err == cudaSuccess) err = cudaEventSynchronize(events[2 * repeats - 1]);
    for (long t = 0; t < repeats && err == cudaSuccess; ++t) err = cudaEventElapsedTime(&ms[t], events[2 * t], events[2 * t + 1]);
    Py_END_ALLOW_THREADS
    if (err != cudaSuccess) {
        raise_kernel_error(st, &kernel, err, "timing");
        goto exit;
    }
    result = PyList_New(repeats);
    for (long t = 0; result != NULL && t < repeats; ++t) PyList_SET_ITEM(result, t, PyFloat_FromDouble(ms[t]));

exit:
    for (long e = 0; e < created; ++e) cudaEventDestroy(events[e]);
    Py_DECREF(set_tuple);
    PyMem_Free(mats);
    PyMem_Free(has_c);
    PyMem_Free(stacks);
    PyMem_Free(events);
    PyMem_Free(ms);
    return result;
}

/* fill_uniform(pointer, count, seed, stream): uniform [-1, 1) floats on the device. */
PyObject *fill_uniform(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fill_uniform(pointer, count, seed, stream) takes 4 arguments");
        return NULL;
    }
    if (refuse_in_forked_child(get_state(module)) < 0) return NULL;
    void *ptr = PyLong_AsVoidPtr(args[0]);
    const long long count = PyLong_AsLongLong(args[1]);
    const unsigned long long seed = PyLong_AsUnsignedLongLongMask(args[2]);
    cudaStream_t stream;
    if (PyErr_Occurred() || stream_from_object(args[3], &stream) < 0) return NULL;
    cudaError_t err = fsg_fill_uniform_cuda(ptr, count, seed, stream);
    if (err != cudaSuccess) return raise_cuda_error(get_state(module), err, "filling with random numbers");
    Py_RETURN_NONE;
}
