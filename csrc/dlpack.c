/*
 * The DLPack capsule protocol, both ways: dlpack_import reads a producer's
 * tensor (legacy or versioned capsule) and holds it until fastsgemm is done
 * with it; dlpack_export hands a 2-D float32 matrix to a consumer, keeping
 * its owner alive until the consumer's deleter runs.
 */
#include "extension.h"

#include "dlpack.h"

/* ---- DLPack: consuming ---- */

static const char kHolderName[] = "fastsgemm.dlpack_holder";

/* The holder keeps an imported tensor alive and calls its producer's deleter
 * exactly once, when the holder goes. Its context says which struct it is. */
static void holder_destructor(PyObject *holder) {
    void *managed = PyCapsule_GetPointer(holder, kHolderName);
    const int versioned = PyCapsule_GetContext(holder) != NULL;
    if (managed == NULL) {
        PyErr_Clear();
        return;
    }
    // A producer's deleter may run Python code, which must neither see nor swallow an exception being raised.
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (versioned) {
        DLManagedTensorVersioned *t = managed;
        if (t->deleter != NULL) t->deleter(t);
    } else {
        DLManagedTensor *t = managed;
        if (t->deleter != NULL) t->deleter(t);
    }
    if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL);  // a deleter that failed: reported, not raised
    PyErr_Restore(type, value, traceback);
}

/* Whether the fields of an imported tensor can be read as fastsgemm reads
 * them; if not, ValueError naming the field. Runs before anything is read
 * through the tensor's pointers. */
static int check_dltensor(const DLTensor *t) {
    enum { kMaxDims = 64 };  // far past any matrix stack; bounds what a corrupt ndim makes us read
    if (t->ndim < 0 || t->ndim > kMaxDims) {
        PyErr_Format(PyExc_ValueError, "DLPack tensor: ndim is %d, expected 0 to %d", (int)t->ndim, kMaxDims);
        return -1;
    }
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_Format(PyExc_ValueError, "DLPack tensor: shape is NULL for a %d-D tensor", (int)t->ndim);
        return -1;
    }
    int64_t elements = 1;
    for (int i = 0; i < t->ndim; ++i) {
        if (t->shape[i] < 0) {
            PyErr_Format(PyExc_ValueError, "DLPack tensor: shape[%d] is %lld, negative", i, (long long)t->shape[i]);
            return -1;
        }
        if (__builtin_mul_overflow(elements, t->shape[i], &elements)) {
            PyErr_SetString(PyExc_ValueError, "DLPack tensor: shape has more elements than 64 bits can count");
            return -1;
        }
    }
    if (t->data == NULL && elements > 0) {
        PyErr_Format(PyExc_ValueError, "DLPack tensor: data is NULL for a tensor of %lld elements", (long long)elements);
        return -1;
    }
    if (t->byte_offset > (uint64_t)INT64_MAX || (uintptr_t)t->data + (uintptr_t)t->byte_offset < (uintptr_t)t->data) {
        PyErr_Format(PyExc_ValueError, "DLPack tensor: byte_offset %llu runs past the end of the address space",
                     (unsigned long long)t->byte_offset);
        return -1;
    }
    return 0;
}

/* dlpack_import(capsule) -> (holder, pointer, shape, strides, device_type,
 * device_id, (code, bits, lanes), readonly). Strides are in elements. The
 * capsule is renamed "used_..." so its own destructor leaves the tensor to
 * the holder. */
PyObject *dlpack_import(PyObject *module, PyObject *capsule) {
    (void)module;
    int versioned;
    if (PyCapsule_IsValid(capsule, "dltensor_versioned"))
        versioned = 1;
    else if (PyCapsule_IsValid(capsule, "dltensor"))
        versioned = 0;
    else {
        PyErr_SetString(PyExc_ValueError, "expected an unconsumed DLPack capsule ('dltensor' or 'dltensor_versioned')");
        return NULL;
    }
    void *managed = PyCapsule_GetPointer(capsule, versioned ? "dltensor_versioned" : "dltensor");
    if (managed == NULL) return NULL;
    DLTensor *t;
    int readonly = 0;
    if (versioned) {
        DLManagedTensorVersioned *v = managed;
        if (v->version.major != 1) {
            PyErr_Format(PyExc_BufferError, "DLPack major version %u is not supported (fastsgemm reads 1.x)",
                         v->version.major);
            return NULL;
        }
        t = &v->dl_tensor;
        readonly = (v->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    } else {
        t = &((DLManagedTensor *)managed)->dl_tensor;
    }

    // From here the holder owns the tensor: on any failure below, its destructor hands it back to the producer.
    PyObject *holder = PyCapsule_New(managed, kHolderName, holder_destructor);
    if (holder == NULL) return NULL;
    if (PyCapsule_SetContext(holder, versioned ? (void *)1 : NULL) < 0 ||
        PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0) {
        PyCapsule_SetDestructor(holder, NULL);  // the capsule still owns the tensor
        Py_DECREF(holder);
        return NULL;
    }

    PyObject *shape = NULL, *strides = NULL;
    if (check_dltensor(t) < 0) goto fail;
    shape = PyTuple_New(t->ndim);
    strides = PyTuple_New(t->ndim);
    if (shape == NULL || strides == NULL) goto fail;
    int64_t compact = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
        const int64_t stride = t->strides != NULL ? t->strides[i] : compact;
        // Only a tensor with no elements gets here with extents whose product overflows; its strides name nothing.
        if (__builtin_mul_overflow(compact, t->shape[i], &compact)) compact = INT64_MAX;
        PyObject *extent = PyLong_FromLongLong(t->shape[i]), *step = PyLong_FromLongLong(stride);
        if (extent == NULL || step == NULL) {
            Py_XDECREF(extent);
            Py_XDECREF(step);
            goto fail;
        }
        PyTuple_SET_ITEM(shape, i, extent);
        PyTuple_SET_ITEM(strides, i, step);
    }
    const uintptr_t address = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    PyObject *result = Py_BuildValue("(NKNNii(iii)O)", holder, (unsigned long long)address, shape, strides,
                                     (int)t->device.device_type, (int)t->device.device_id, (int)t->dtype.code,
                                     (int)t->dtype.bits, (int)t->dtype.lanes, readonly ? Py_True : Py_False);
    return result;  // on failure Py_BuildValue has released the "N" references

fail:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_DECREF(holder);  // calls the deleter: the capsule was already marked used
    return NULL;
}

/* ---- DLPack: producing ---- */

typedef struct exported {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } head; /* first, so the deleter's `self` is the whole struct */
    int64_t shape[2];
    int64_t strides[2];
    PyObject *owner; /* keeps the memory alive until the consumer lets go */
} exported;

static void release_exported(exported *e) {
    // Consumers may call the deleter from any thread, with or without the GIL.
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_XDECREF(e->owner);
        PyGILState_Release(gil);
    }
    PyMem_RawFree(e);
}

static void delete_legacy(DLManagedTensor *self) { release_exported((exported *)self); }
static void delete_versioned(DLManagedTensorVersioned *self) { release_exported((exported *)self); }

/* A capsule nobody consumed still owns its tensor. */
static void exported_capsule_destructor(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *t = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        t->deleter(t);
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *t = PyCapsule_GetPointer(capsule, "dltensor");
        t->deleter(t);
    }
}

/* dlpack_export(owner, pointer, rows, cols, row_stride, col_stride,
 * device_type, device_id, versioned) -> capsule of a 2-D float32 tensor. */
PyObject *dlpack_export(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *owner;
    unsigned long long ptr;
    long long rows, cols, rs, cs;
    int device_type, device_id, versioned;
    if (!PyArg_ParseTuple(args, "OKLLLLiip:dlpack_export", &owner, &ptr, &rows, &cols, &rs, &cs, &device_type,
                          &device_id, &versioned))
        return NULL;
    exported *e = PyMem_RawCalloc(1, sizeof *e);
    if (e == NULL) return PyErr_NoMemory();
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->strides[0] = rs;
    e->strides[1] = cs;
    e->owner = Py_NewRef(owner);
    DLTensor *t = versioned ? &e->head.versioned.dl_tensor : &e->head.legacy.dl_tensor;
    *t = (DLTensor){.data = (void *)(uintptr_t)ptr,
                    .device = {.device_type = device_type, .device_id = device_id},
                    .ndim = 2,
                    .dtype = {.code = kDLFloat, .bits = 32, .lanes = 1},
                    .shape = e->shape,
                    .strides = e->strides,
                    .byte_offset = 0};
    if (versioned) {
        e->head.versioned.version = (DLPackVersion){.major = 1, .minor = 0};
        e->head.versioned.deleter = delete_versioned;
    } else {
        e->head.legacy.deleter = delete_legacy;
    }
    PyObject *capsule = PyCapsule_New(e, versioned ? "dltensor_versioned" : "dltensor", exported_capsule_destructor);
    if (capsule == NULL) release_exported(e);
    return capsule;
}
