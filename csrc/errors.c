/*
 * errors.c: CUDA failures as Python exceptions. The bottom of the C
 * extension: every other file may call it, and it calls none of them.
 */
#include "extension.h"

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
                       : err == cudaErrorNoKernelImageForDevice
                           ? " This build of fastsgemm has no code this GPU can run (python -m fastsgemm says what "
                             "it was built for). fastsgemm needs compute capability 8.0 or newer; on such a GPU, "
                             "rebuild on this machine: FASTSGEMM_CUDA_ARCHS=native pip install --no-cache-dir "
                             "--force-reinstall, or =portable (docs/install.md)."
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
