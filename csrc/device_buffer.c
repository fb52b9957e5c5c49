/*
 * device_buffer.c: fastsgemm._sgemm.DeviceBuffer, the device memory a
 * DeviceArray owns, with its stream-ordered result pools; and
 * fastsgemm._sgemm.DeviceMatrix, DeviceArray's base, whose fields the fast
 * path reads. The module (csrc/_sgemm.c) makes the types from their specs.
 */
#include "extension.h"

#include <structmember.h>

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

PyType_Spec device_buffer_spec = {
    .name = "fastsgemm._sgemm.DeviceBuffer",
    .basicsize = sizeof(DeviceBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = DeviceBuffer_slots,
};

cudaError_t result_pool_follow_limit(int device) {
    if (device < 0 || device >= 64 || result_pools[device] == NULL) return cudaSuccess;
    uint64_t keep = result_pool_keeps_now(device);
    return cudaMemPoolSetAttribute(result_pools[device], cudaMemPoolAttrReleaseThreshold, &keep);
}

/* ---- DeviceMatrix: fastsgemm.DeviceArray's base ----
 * The Python class (python/fastsgemm/_device_array.py) derives from this type, so that its buffer, shape and last
 * writer's stream live in the instance's struct (extension.h, DeviceMatrix), where the C fast path reads them
 * directly. Python sees them as the read-only _buffer and _shape and the writable _stream; _bind sets the first
 * two, once the class's __init__ has checked its arguments. */

/* _bind(buffer, rows, cols): the matrix over `buffer`, row-major. */
static PyObject *DeviceMatrix_bind(DeviceMatrix *self, PyTypeObject *defining_class, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs != 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "_bind(buffer, rows, cols) takes 3 positional arguments");
        return NULL;
    }
    const module_state *st = PyType_GetModuleState(defining_class);
    if (st == NULL) return NULL;
    if (Py_TYPE(args[0]) != st->device_buffer) {
        PyErr_Format(PyExc_TypeError, "a DeviceMatrix's memory is a fastsgemm DeviceBuffer, not %.100s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    const long long rows = PyLong_AsLongLong(args[1]), cols = PyLong_AsLongLong(args[2]);
    if ((rows == -1 || cols == -1) && PyErr_Occurred()) return NULL;
    const Py_ssize_t nbytes = ((const DeviceBuffer *)args[0])->nbytes;
    if (rows < 0 || cols < 0 || (cols > 0 && rows > nbytes / 4 / cols)) {
        PyErr_Format(PyExc_ValueError, "shape (%lld, %lld) does not fit a buffer of %zd bytes", rows, cols, nbytes);
        return NULL;
    }
    Py_XSETREF(self->buffer, Py_NewRef(args[0]));
    self->rows = rows;
    self->cols = cols;
    Py_RETURN_NONE;
}

static PyObject *DeviceMatrix_buffer(DeviceMatrix *self, void *closure) {
    (void)closure;
    if (self->buffer == NULL) {
        PyErr_SetString(PyExc_AttributeError, "this DeviceMatrix has no memory yet (_bind was not called)");
        return NULL;
    }
    return Py_NewRef(self->buffer);
}

static PyObject *DeviceMatrix_shape(DeviceMatrix *self, void *closure) {
    (void)closure;
    return Py_BuildValue("(LL)", (long long)self->rows, (long long)self->cols);
}

static PyObject *DeviceMatrix_stream(DeviceMatrix *self, void *closure) {
    (void)closure;
    return Py_NewRef(self->stream != NULL ? self->stream : Py_None);
}

static int DeviceMatrix_set_stream(DeviceMatrix *self, PyObject *value, void *closure) {
    (void)closure;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_stream cannot be deleted (set it to None)");
        return -1;
    }
    // A stream handle (an int) or None: what the fast path reads it as. Nothing else, so that no chain or cycle of
    // objects can hang from a matrix (the type has no garbage-collector support and needs none).
    if (value != Py_None && !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "_stream is a CUDA stream handle (an int) or None, not %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_XSETREF(self->stream, value == Py_None ? NULL : Py_NewRef(value));
    return 0;
}

static void DeviceMatrix_dealloc(DeviceMatrix *self) {
    PyTypeObject *type = Py_TYPE(self);
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    Py_CLEAR(self->buffer);
    Py_CLEAR(self->stream);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMemberDef DeviceMatrix_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(DeviceMatrix, weakrefs), READONLY, NULL},
    {NULL},
};

static PyGetSetDef DeviceMatrix_getset[] = {
    {"_buffer", (getter)DeviceMatrix_buffer, NULL, "the DeviceBuffer that holds the matrix", NULL},
    {"_shape", (getter)DeviceMatrix_shape, NULL, "(rows, cols)", NULL},
    {"_stream", (getter)DeviceMatrix_stream, (setter)DeviceMatrix_set_stream,
     "the stream of the last write, for consumers to wait on (None: nothing to wait for)", NULL},
    {NULL},
};

static PyMethodDef DeviceMatrix_methods[] = {
    {"_bind", (PyCFunction)(void (*)(void))DeviceMatrix_bind, METH_METHOD | METH_FASTCALL | METH_KEYWORDS,
     "_bind(buffer, rows, cols): the matrix over a DeviceBuffer, row-major; the shape must fit the buffer"},
    {NULL},
};

static PyType_Slot DeviceMatrix_slots[] = {
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, DeviceMatrix_dealloc},
    {Py_tp_members, DeviceMatrix_members},
    {Py_tp_getset, DeviceMatrix_getset},
    {Py_tp_methods, DeviceMatrix_methods},
    {Py_tp_doc, "The C half of fastsgemm.DeviceArray: a row-major float32 matrix in a DeviceBuffer."},
    {0, NULL},
};

PyType_Spec device_matrix_spec = {
    .name = "fastsgemm._sgemm.DeviceMatrix",
    .basicsize = sizeof(DeviceMatrix),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = DeviceMatrix_slots,
};
