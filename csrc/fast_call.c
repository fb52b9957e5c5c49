/*
 * fast_call.c: sgemm's fast path, for the calls a notebook or a training loop
 * makes thousands of times.
 *
 * fastsgemm.sgemm first hands its arguments to sgemm_fast. When every
 * operand is of one common kind (torch CUDA tensors, CuPy arrays,
 * fastsgemm.DeviceArray, or NumPy arrays) and nothing about the call is
 * unusual, this file reads the operands straight from the objects'
 * attributes, picks the kernel (kernel="auto" from a cache), allocates the
 * result in the operands' framework and runs the GEMM: one C call, no
 * dictionaries, no dataclasses, no stream wait where the producer's stream is
 * the working stream. Anything else (DLPack, other __cuda_array_interface__
 * producers, dtypes or shapes that are wrong, mixed kinds, operands that
 * reach outside their allocation) returns NotImplemented before anything is
 * enqueued (an `out` whose elements overlap is refused by run_gemm), and
 * the general path in python/fastsgemm/_api.py runs instead: it takes every
 * input and says what is wrong with the bad ones.
 *
 * Streams, as the general path has them: torch tensors run on torch's current
 * stream of their device and CuPy arrays on CuPy's (the framework orders its
 * own arrays, so there is nothing to wait for); a DeviceArray A names the
 * stream (the one that last wrote it, else the legacy default stream), and
 * the other DeviceArrays' last writers are waited for when they differ.
 */
#include "extension.h"

#include <string.h>

/* What kind of object an operand is, as far as the fast path is concerned. */
typedef enum operand_kind {
    KIND_OTHER = 0, /* the general path's business */
    KIND_NUMPY,
    KIND_TORCH,
    KIND_CUPY,
    KIND_DEVICE_ARRAY,
} operand_kind;

/* ---- state ---- */

int fast_state_init(fast_state *fs) {
    static const struct {
        size_t offset;
        const char *text;
    } names[] = {
        {offsetof(fast_state, s_dtype), "dtype"},
        {offsetof(fast_state, s_shape), "shape"},
        {offsetof(fast_state, s_stride), "stride"},
        {offsetof(fast_state, s_strides), "strides"},
        {offsetof(fast_state, s_data_ptr), "data_ptr"},
        {offsetof(fast_state, s_get_device), "get_device"},
        {offsetof(fast_state, s_is_cuda), "is_cuda"},
        {offsetof(fast_state, s_requires_grad), "requires_grad"},
        {offsetof(fast_state, s_data), "data"},
        {offsetof(fast_state, s_ptr), "ptr"},
        {offsetof(fast_state, s_device_id), "device_id"},
        {offsetof(fast_state, s_new_empty), "new_empty"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        PyObject *name = PyUnicode_InternFromString(names[i].text);
        if (name == NULL) return -1;
        *(PyObject **)((char *)fs + names[i].offset) = name;
    }
    fs->cuda_devices = -1;
    for (int i = 0; i < kAutoSlots; ++i) fs->auto_cache[i].device = -1;
    return 0;
}

#define FAST_STATE_OBJECTS(X)                                                                                     \
    X(ndarray_type) X(numpy_empty) X(float32_dtype) X(device_array_type) X(auto_chooser) X(torch_tensor_type)    \
    X(torch_float32) X(torch_raw_stream) X(torch_is_grad_enabled) X(s_requires_grad) X(cupy_ndarray_type) X(cupy_empty) X(cupy_current_stream) X(s_dtype)   \
    X(s_shape) X(s_stride) X(s_strides) X(s_data_ptr) X(s_get_device) X(s_is_cuda) X(s_data) X(s_ptr)           \
    X(s_device_id) X(s_new_empty)

int fast_state_traverse(fast_state *fs, visitproc visit, void *arg) {
#define VISIT(field) Py_VISIT(fs->field);
    FAST_STATE_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

void fast_state_clear(fast_state *fs) {
#define CLEAR(field) Py_CLEAR(fs->field);
    FAST_STATE_OBJECTS(CLEAR)
#undef CLEAR
}

/* register_fast_path(numpy.ndarray, numpy.empty, numpy.dtype("float32"), DeviceArray, auto_chooser) */
PyObject *register_fast_path(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "register_fast_path(ndarray, empty, float32, DeviceArray, auto_chooser) takes 5 arguments");
        return NULL;
    }
    module_state *st = get_state(module);
    fast_state *fs = &st->fast;
    // read_device_array takes an instance of the class for a DeviceMatrix (extension.h)
    if (!PyType_Check(args[3]) || !PyType_IsSubtype((PyTypeObject *)args[3], st->device_matrix)) {
        PyErr_SetString(PyExc_TypeError, "register_fast_path: the DeviceArray class must derive from DeviceMatrix");
        return NULL;
    }
    Py_XSETREF(fs->ndarray_type, Py_NewRef(args[0]));
    Py_XSETREF(fs->numpy_empty, Py_NewRef(args[1]));
    Py_XSETREF(fs->float32_dtype, Py_NewRef(args[2]));
    Py_XSETREF(fs->device_array_type, Py_NewRef(args[3]));
    Py_XSETREF(fs->auto_chooser, Py_NewRef(args[4]));
    Py_RETURN_NONE;
}

/* A module the user has imported, or NULL (no error set) when it is not in sys.modules. */
static PyObject *imported(const char *name) {
    PyObject *key = PyUnicode_FromString(name);
    if (key == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *module = PyImport_GetModule(key);
    Py_DECREF(key);
    if (module == NULL) PyErr_Clear();
    return module;
}

/* Attribute `path` ("a.b.c") of `root`, or NULL with no error set. */
static PyObject *attribute_path(PyObject *root, const char *path) {
    PyObject *obj = Py_NewRef(root);
    char part[64];
    while (obj != NULL && *path) {
        const char *dot = strchr(path, '.');
        const size_t len = dot ? (size_t)(dot - path) : strlen(path);
        if (len >= sizeof part) {
            Py_CLEAR(obj);
            break;
        }
        memcpy(part, path, len);
        part[len] = '\0';
        Py_SETREF(obj, PyObject_GetAttrString(obj, part));
        path += len + (dot ? 1 : 0);
    }
    if (obj == NULL) PyErr_Clear();
    return obj;
}

/* Takes what the fast path needs from torch and CuPy once the user has imported them. */
static void find_frameworks(fast_state *fs) {
    if (fs->torch_tensor_type == NULL) {
        PyObject *torch = imported("torch");
        if (torch != NULL) {
            PyObject *tensor = attribute_path(torch, "Tensor"), *float32 = attribute_path(torch, "float32");
            // The current stream as a raw cudaStream_t, in one C call (torch.cuda.current_stream builds a Stream).
            PyObject *raw = attribute_path(torch, "_C._cuda_getCurrentRawStream");
            PyObject *grad_mode = attribute_path(torch, "is_grad_enabled");
            if (tensor != NULL && PyType_Check(tensor) && float32 != NULL && raw != NULL && grad_mode != NULL) {
                fs->torch_tensor_type = Py_NewRef(tensor);
                fs->torch_float32 = Py_NewRef(float32);
                fs->torch_raw_stream = Py_NewRef(raw);
                fs->torch_is_grad_enabled = Py_NewRef(grad_mode);
            }
            Py_XDECREF(tensor);
            Py_XDECREF(float32);
            Py_XDECREF(raw);
            Py_XDECREF(grad_mode);
            Py_DECREF(torch);
        }
    }
    if (fs->cupy_ndarray_type == NULL) {
        PyObject *cupy = imported("cupy");
        if (cupy != NULL) {
            PyObject *ndarray = attribute_path(cupy, "ndarray"), *empty = attribute_path(cupy, "empty");
            PyObject *stream = attribute_path(cupy, "cuda.get_current_stream");
            if (ndarray != NULL && PyType_Check(ndarray) && empty != NULL && stream != NULL) {
                fs->cupy_ndarray_type = Py_NewRef(ndarray);
                fs->cupy_empty = Py_NewRef(empty);
                fs->cupy_current_stream = Py_NewRef(stream);
            }
            Py_XDECREF(ndarray);
            Py_XDECREF(empty);
            Py_XDECREF(stream);
            Py_DECREF(cupy);
        }
    }
}

static operand_kind kind_of(fast_state *fs, PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    if ((PyObject *)type == fs->ndarray_type) return KIND_NUMPY;  // exactly: subclasses (masked arrays) go the long way
    if ((PyObject *)type == fs->device_array_type) return KIND_DEVICE_ARRAY;
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (fs->torch_tensor_type != NULL && PyType_IsSubtype(type, (PyTypeObject *)fs->torch_tensor_type))
            return KIND_TORCH;
        if (fs->cupy_ndarray_type != NULL && PyType_IsSubtype(type, (PyTypeObject *)fs->cupy_ndarray_type))
            return KIND_CUPY;
        if (attempt == 0) find_frameworks(fs);
    }
    return KIND_OTHER;
}

/* ---- reading one operand (0: read; 1: not for the fast path; -1: a real error, set) ---- */

static int long_of(PyObject *obj, int64_t *value) {
    if (obj == NULL || !PyLong_Check(obj)) return 1;
    const long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 1;
    }
    *value = v;
    return 0;
}

/* Two integers from a tuple (or tuple subclass, such as torch.Size) of length 2. */
static int pair_of(PyObject *tuple, int64_t *first, int64_t *second) {
    if (tuple == NULL || !PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 2) return 1;
    if (long_of(PyTuple_GET_ITEM(tuple, 0), first) || long_of(PyTuple_GET_ITEM(tuple, 1), second)) return 1;
    return 0;
}

/* A matrix, or a stack of matrices: the integers of a shape or strides tuple of 2 or, where max_rank is 3, 3
 * entries, as (count, step) for the stack and the matrix's two. A matrix is a stack of one, step 0. */
static int stack_of(PyObject *tuple, int max_rank, int64_t *count, int64_t *first, int64_t *second) {
    if (tuple == NULL || !PyTuple_Check(tuple)) return 1;
    const Py_ssize_t rank = PyTuple_GET_SIZE(tuple);
    if (rank == 2) {
        *count = -1;  // no stack dimension (the caller tells a matrix's count, 1, from its step, 0)
        return pair_of(tuple, first, second);
    }
    if (rank != 3 || max_rank < 3) return 1;
    return long_of(PyTuple_GET_ITEM(tuple, 0), count) || long_of(PyTuple_GET_ITEM(tuple, 1), first) ||
           long_of(PyTuple_GET_ITEM(tuple, 2), second);
}

/* A stack as the fast path reads it: op's matrix, `count` of them `step` elements apart (1 and 0 for a matrix;
 * rank says which it was). */
typedef struct stack_shape {
    int rank;
    int64_t count, step;
} stack_shape;

static void set_device_matrix(operand *op, int64_t ptr, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                              int device) {
    memset(op, 0, sizeof *op);
    op->mat = (fsg_matrix){.ptr = (float *)(uintptr_t)ptr, .rows = rows, .cols = cols, .rs = rs, .cs = cs,
                           .side = FSG_DEVICE};
    op->device = device;
}

/* Whether a framework's device matrix (or stack) lies inside its allocation,
 * on the device it says (csrc/allocation.c); if not, the general path raises
 * the error, naming the operand. */
static int extent_checked(module_state *st, const operand *op, const stack_shape *stack) {
    if (op->mat.rows == 0 || op->mat.cols == 0 || stack->count == 0) return 1;
    int device;
    if (check_device_stack(st, &op->mat, stack->count, stack->step, "operand", &device) < 0) {
        PyErr_Clear();
        return 0;
    }
    return device == op->device;
}

/* What the fast path reads of a float32 CUDA tensor that autograd does not record: its device, the address of its
 * first element (4-byte aligned), and new references to its shape and strides (tuples of one length). 0, or 1
 * (not for the fast path, no exception set, nothing to release). */
static int read_torch_header(fast_state *fs, PyObject *obj, int64_t *device_index, int64_t *address,
                             PyObject **shape, PyObject **stride) {
    int status = 1;
    PyObject *dtype = NULL, *is_cuda = NULL, *device = NULL, *ptr = NULL, *requires_grad = NULL, *recording = NULL;
    *shape = *stride = NULL;
    dtype = PyObject_GetAttr(obj, fs->s_dtype);
    if (dtype != fs->torch_float32) goto done;
    // A tensor that autograd would record (requires_grad, grad mode on) is the general path's: it gives the
    // product a gradient (fastsgemm.torch's operator) or says why it cannot. Under no_grad it runs here.
    requires_grad = PyObject_GetAttr(obj, fs->s_requires_grad);
    if (requires_grad != Py_False) {
        if (requires_grad != Py_True) goto done;
        recording = PyObject_CallNoArgs(fs->torch_is_grad_enabled);
        if (recording != Py_False) goto done;
    }
    is_cuda = PyObject_GetAttr(obj, fs->s_is_cuda);
    if (is_cuda != Py_True) goto done;
    // Each call only after the one before succeeded: none runs with an exception set.
    if ((device = PyObject_CallMethodNoArgs(obj, fs->s_get_device)) == NULL ||
        (*shape = PyObject_GetAttr(obj, fs->s_shape)) == NULL ||
        (*stride = PyObject_CallMethodNoArgs(obj, fs->s_stride)) == NULL ||
        (ptr = PyObject_CallMethodNoArgs(obj, fs->s_data_ptr)) == NULL)
        goto done;
    if (long_of(device, device_index) || long_of(ptr, address) || *address % (int64_t)sizeof(float) != 0 ||
        !PyTuple_Check(*shape) || !PyTuple_Check(*stride) || PyTuple_GET_SIZE(*shape) != PyTuple_GET_SIZE(*stride))
        goto done;
    status = 0;
done:
    if (PyErr_Occurred()) PyErr_Clear();  // whatever went wrong, the general path will say it properly
    if (status != 0) {
        Py_CLEAR(*shape);
        Py_CLEAR(*stride);
    }
    Py_XDECREF(dtype);
    Py_XDECREF(requires_grad);
    Py_XDECREF(recording);
    Py_XDECREF(is_cuda);
    Py_XDECREF(device);
    Py_XDECREF(ptr);
    return status;
}

/* A stack of stack->rank 2 (a matrix) or, where max_rank is 3, 3 dimensions. */
static int read_torch(module_state *st, PyObject *obj, operand *op, int max_rank, stack_shape *stack) {
    PyObject *shape, *stride;
    int64_t device_index, rows, cols, rs, cs, address, count, step;
    if (read_torch_header(&st->fast, obj, &device_index, &address, &shape, &stride)) return 1;
    int status = 1;
    if (stack_of(shape, max_rank, &count, &rows, &cols) || stack_of(stride, max_rank, &step, &rs, &cs) || rows < 0 ||
        cols < 0)
        goto done;
    *stack = count < 0 ? (stack_shape){2, 1, 0} : (stack_shape){3, count, step};
    set_device_matrix(op, address, rows, cols, rs, cs, (int)device_index);
    // A tensor made by torch.as_tensor or torch.from_dlpack keeps whatever shape its producer claimed (and a
    // subclass can answer anything), so torch tensors are checked against their allocation like the rest.
    if (!extent_checked(st, op, stack)) goto done;
    status = 0;
done:
    if (PyErr_Occurred()) PyErr_Clear();
    Py_DECREF(shape);
    Py_DECREF(stride);
    return status;
}

/* A 1-D tensor of n elements read as the rows x n matrix whose every row it is (a row stride of zero): a bias. */
static int read_torch_row(module_state *st, PyObject *obj, int64_t rows, int64_t n, operand *op) {
    PyObject *shape, *stride;
    int64_t device_index, address, length, step;
    if (read_torch_header(&st->fast, obj, &device_index, &address, &shape, &stride)) return 1;
    int status = 1;
    if (PyTuple_GET_SIZE(shape) != 1 || long_of(PyTuple_GET_ITEM(shape, 0), &length) ||
        long_of(PyTuple_GET_ITEM(stride, 0), &step) || length != n)
        goto done;
    set_device_matrix(op, address, rows, n, 0, step, (int)device_index);
    const stack_shape matrix = {2, 1, 0};
    if (!extent_checked(st, op, &matrix)) goto done;
    status = 0;
done:
    if (PyErr_Occurred()) PyErr_Clear();
    Py_DECREF(shape);
    Py_DECREF(stride);
    return status;
}

/* A 2-D or 3-D read (read_torch) as one matrix of its rows, end to end, where its strides let them be: a
 * (count, rows, cols) stack whose matrices follow each other row after row, as torch's view(-1, cols) merges
 * them (an empty stack always merges). 0, or 1 where they do not. */
static int merge_rows(operand *op, const stack_shape *stack) {
    if (stack->rank == 2 || stack->count == 1) return 0;
    fsg_matrix *m = &op->mat;
    if (m->rows == 0 || stack->count == 0) m->rows = 0;  // no element: nothing to read, whatever the strides
    else if (m->rows == 1) m->rs = stack->step;           // one row a matrix: the rows are the stack's
    else if (stack->step != m->rows * m->rs) return 1;
    m->rows *= stack->count;
    return 0;
}

static int read_cupy(module_state *st, PyObject *obj, operand *op, int max_rank, stack_shape *stack) {
    fast_state *fs = &st->fast;
    int status = 1;
    PyObject *dtype = NULL, *shape = NULL, *strides = NULL, *data = NULL, *ptr = NULL, *device = NULL;
    int64_t rows, cols, rs, cs, address, device_id, count, step;
    dtype = PyObject_GetAttr(obj, fs->s_dtype);
    if (dtype != fs->float32_dtype) goto done;  // numpy's float32 dtype is one object
    shape = PyObject_GetAttr(obj, fs->s_shape);
    strides = PyObject_GetAttr(obj, fs->s_strides);
    data = PyObject_GetAttr(obj, fs->s_data);
    if (data == NULL) goto done;
    ptr = PyObject_GetAttr(data, fs->s_ptr);
    device = PyObject_GetAttr(data, fs->s_device_id);
    if (stack_of(shape, max_rank, &count, &rows, &cols) || stack_of(strides, max_rank, &step, &rs, &cs) ||
        PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(strides) || long_of(ptr, &address) ||
        long_of(device, &device_id) || rs % 4 != 0 || cs % 4 != 0 || address % 4 != 0 ||
        (count >= 0 && step % 4 != 0))
        goto done;
    *stack = count < 0 ? (stack_shape){2, 1, 0} : (stack_shape){3, count, step / 4};
    set_device_matrix(op, address, rows, cols, rs / 4, cs / 4, (int)device_id);
    // CuPy does not check a view against its memory (cupy.lib.stride_tricks.as_strided).
    if (rows < 0 || cols < 0 || !extent_checked(st, op, stack)) goto done;
    status = 0;
done:
    if (PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(data);
    Py_XDECREF(ptr);
    Py_XDECREF(device);
    return status;
}

/* A DeviceArray: its DeviceMatrix fields (extension.h), which _bind checked: row-major, the shape within the
 * buffer. *stream is the stream of its last write (None: nothing to wait for). */
static int read_device_array(PyObject *obj, operand *op, PyObject **stream) {
    const DeviceMatrix *matrix = (const DeviceMatrix *)obj;  // register_fast_path checked the class
    if (matrix->buffer == NULL) return 1;                     // never bound: the general path says why
    const DeviceBuffer *db = (const DeviceBuffer *)matrix->buffer;
    set_device_matrix(op, (int64_t)(uintptr_t)db->ptr, matrix->rows, matrix->cols, matrix->cols, 1, db->device);
    *stream = Py_NewRef(matrix->stream != NULL ? matrix->stream : Py_None);
    return 0;
}

static int read_numpy(module_state *st, PyObject *obj, int writable, operand *op) {
    if (parse_operand(st, obj, "operand", writable, op) < 0) {
        PyErr_Clear();  // wrong dtype, dimensions, alignment or a read-only out: the general path says which
        return 1;
    }
    return 0;
}

/* ---- the kernel ---- */

/* A kernel named "rung" or "rung:config" (0), or 1 when the name is not one
 * (the general path lists the valid ones). */
static int kernel_by_name(const char *name, Py_ssize_t length, kernel_choice *choice) {
    const char *colon = memchr(name, ':', (size_t)length);
    const size_t rung_length = colon ? (size_t)(colon - name) : (size_t)length;
    for (int i = 0; i < fsg_rung_count; ++i) {
        const fsg_rung *rung = &fsg_rungs[i];
        if (strlen(rung->name) != rung_length || memcmp(rung->name, name, rung_length) != 0) continue;
        if (colon == NULL) return choose_kernel(i, -1, choice) == 0 ? 0 : (PyErr_Clear(), 1);
        const char *config = colon + 1;
        const size_t config_length = (size_t)length - rung_length - 1;
        for (int j = 0; j < rung->config_count; ++j)
            if (strlen(rung->configs[j].name) == config_length && memcmp(rung->configs[j].name, config, config_length) == 0)
                return choose_kernel(i, j, choice) == 0 ? 0 : (PyErr_Clear(), 1);
        return 1;
    }
    return 1;
}

static unsigned auto_slot_of(int device, int64_t m, int64_t n, int64_t k, int64_t count) {
    uint64_t h = (uint64_t)device * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)m + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)n + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)k + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)count + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return (unsigned)(h % kAutoSlots);
}

/* kernel="auto" for a stack of `count` m x n x k problems (1: one product)
 * on `device`: the tuning table's choice (python/fastsgemm/_tuning.py,
 * through the registered chooser), remembered per (device, shape, count).
 * 0, or -1 with an exception set. */
int auto_kernel(fast_state *fs, int device, int64_t m, int64_t n, int64_t k, int64_t count, kernel_choice *choice) {
    auto_slot *slot = &fs->auto_cache[auto_slot_of(device, m, n, k, count)];
    if (slot->device != device || slot->m != m || slot->n != n || slot->k != k || slot->count != count) {
        if (fs->auto_chooser == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "fastsgemm's fast path was not registered");
            return -1;
        }
        PyObject *picked = PyObject_CallFunction(fs->auto_chooser, "iLLLL", device, (long long)m, (long long)n,
                                                 (long long)k, (long long)count);
        if (picked == NULL) return -1;
        long rung, config;
        const int ok = PyArg_ParseTuple(picked, "ll;the auto chooser returns (rung, config)", &rung, &config);
        Py_DECREF(picked);
        if (!ok) return -1;
        *slot = (auto_slot){
            .m = m, .n = n, .k = k, .count = count, .device = device, .rung = (int)rung, .config = (int)config};
    }
    return choose_kernel(slot->rung, slot->config, choice);
}

void auto_problem_of_stack(const operand ops[3], int64_t count, const int64_t steps[3], int64_t problem[4]) {
    fsg_matrix a = ops[0].mat, b = ops[1].mat, out = ops[2].mat;
    const bool in_order = !stack_distinct(&ops[2].mat, count, steps[2]);
    const bool one = !in_order && fsg_batch_as_one(&ops[0].mat, &ops[1].mat, &ops[2].mat, count, steps[0], steps[1],
                                                   steps[2], INT64_MAX, &a, &b, &out);
    int64_t ld;
    const bool one_by_one = in_order || a.cols == 0 || fsg_classify(&ops[0].mat, &ld) == FSG_OTHER_LAYOUT ||
                            fsg_classify(&ops[1].mat, &ld) == FSG_OTHER_LAYOUT ||
                            fsg_classify(&ops[2].mat, &ld) == FSG_OTHER_LAYOUT;
    problem[0] = out.rows;
    problem[1] = out.cols;
    problem[2] = a.cols;
    problem[3] = one || one_by_one ? 1 : count;
}

PyObject *forget_auto_choices(PyObject *module, PyObject *unused) {
    (void)unused;
    fast_state *fs = &get_state(module)->fast;
    for (int i = 0; i < kAutoSlots; ++i) fs->auto_cache[i].device = -1;
    Py_RETURN_NONE;
}

/* ---- sgemm_fast(A, B, C, out, alpha, beta, kernel) ---- */

static int real_of(PyObject *obj, double *value) {
    if (PyFloat_CheckExact(obj)) {
        *value = PyFloat_AS_DOUBLE(obj);
        return 0;
    }
    if (PyLong_CheckExact(obj)) {
        *value = PyLong_AsDouble(obj);
        if (*value == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 1;
        }
        return 0;
    }
    return 1;
}

/* A new uninitialised float32 array of `shape` (a tuple) for a call whose A is
 * `template`, of `kind`, on `device` (-1: host memory): a NumPy array for
 * host calls, a torch tensor or a CuPy array on the device for those, else a
 * DeviceArray (matrices only; its buffer allocated on `stream`, which it
 * remembers as its writer: an int handle or None). The one place a result is
 * made, for the fast path and the general path (result_like) alike. NULL with
 * an exception set. */
static PyObject *new_result_of_shape(module_state *st, operand_kind kind, PyObject *template, int device,
                                     PyObject *shape, PyObject *stream) {
    fast_state *fs = &st->fast;
    if (device < 0) return PyObject_CallFunctionObjArgs(fs->numpy_empty, shape, fs->float32_dtype, NULL);
    if (kind == KIND_TORCH) return PyObject_CallMethodOneArg(template, fs->s_new_empty, shape);
    if (kind == KIND_CUPY) {
        // cupy.empty allocates on the current device: make the operands' current for the call.
        saved_context saved;
        if (enter_device(st, device, &saved) < 0) return NULL;
        PyObject *result = PyObject_CallFunctionObjArgs(fs->cupy_empty, shape, fs->float32_dtype, NULL);
        leave_device(&saved);
        return result;
    }
    int64_t m, n;
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != 2 || long_of(PyTuple_GET_ITEM(shape, 0), &m) ||
        long_of(PyTuple_GET_ITEM(shape, 1), &n) || m < 0 || n < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "a DeviceArray result takes a shape of two extents");
        return NULL;
    }
    // Its bytes counted without wrapping: an m x 0 by 0 x n product of empty DeviceArrays can ask for 2^64.
    int64_t elements, bytes;
    if (__builtin_mul_overflow(m, n, &elements) || __builtin_mul_overflow(elements, (int64_t)sizeof(float), &bytes) ||
        bytes > PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_ValueError, "a %lld x %lld float32 result needs more bytes than can be addressed",
                     (long long)m, (long long)n);
        return NULL;
    }
    // On the stream that will write it: from the stream-ordered pool where that stream allows (device_buffer.c).
    PyObject *buffer = PyObject_CallFunction((PyObject *)st->device_buffer, "niO", (Py_ssize_t)bytes, device, stream);
    if (buffer == NULL) return NULL;
    // Its DeviceMatrix fields set here, as _bind would (the buffer holds m * n floats): no Python __init__.
    PyTypeObject *type = (PyTypeObject *)fs->device_array_type;
    DeviceMatrix *matrix = (DeviceMatrix *)type->tp_alloc(type, 0);
    if (matrix == NULL) {
        Py_DECREF(buffer);
        return NULL;
    }
    matrix->buffer = buffer;  // the reference is the matrix's now
    matrix->rows = m;
    matrix->cols = n;
    matrix->stream = stream == Py_None ? NULL : Py_NewRef(stream);
    return (PyObject *)matrix;
}

/* new_result_of_shape for an m x n matrix (count < 0) or a count x m x n stack. */
static PyObject *new_result(module_state *st, operand_kind kind, PyObject *template, int device, int64_t count,
                            int64_t m, int64_t n, PyObject *stream) {
    PyObject *shape = count < 0 ? Py_BuildValue("(LL)", (long long)m, (long long)n)
                                : Py_BuildValue("(LLL)", (long long)count, (long long)m, (long long)n);
    if (shape == NULL) return NULL;
    PyObject *result = new_result_of_shape(st, kind, template, device, shape, stream);
    Py_DECREF(shape);
    return result;
}

static int read_operand(module_state *st, operand_kind kind, PyObject *obj, int writable, operand *op,
                        PyObject **stream) {
    *stream = NULL;
    stack_shape matrix;
    switch (kind) {
    case KIND_NUMPY: return read_numpy(st, obj, writable, op);
    case KIND_TORCH: return read_torch(st, obj, op, 2, &matrix);
    case KIND_CUPY: return read_cupy(st, obj, op, 2, &matrix);
    case KIND_DEVICE_ARRAY: return read_device_array(obj, op, stream);
    default: return 1;
    }
}

/* The stream the work goes on, for a call whose A is of `kind` on `device`.
 * 0, 1 (not for the fast path), or -1 with an exception set. */
static int working_stream(fast_state *fs, operand_kind kind, int device, PyObject *a_stream, cudaStream_t *stream) {
    PyObject *handle = NULL;
    switch (kind) {
    case KIND_NUMPY: *stream = cudaStreamPerThread; return 0;  // host calls wait for their own work
    case KIND_TORCH: handle = PyObject_CallFunction(fs->torch_raw_stream, "i", device); break;
    case KIND_CUPY: {
        PyObject *current = PyObject_CallFunction(fs->cupy_current_stream, "i", device);
        if (current != NULL) handle = PyObject_GetAttr(current, fs->s_ptr);
        Py_XDECREF(current);
        break;
    }
    case KIND_DEVICE_ARRAY: handle = a_stream == Py_None ? PyLong_FromLong(0) : Py_NewRef(a_stream); break;
    default: return 1;
    }
    if (handle == NULL) return -1;
    void *p = PyLong_AsVoidPtr(handle);
    Py_DECREF(handle);
    if (p == NULL && PyErr_Occurred()) return -1;
    *stream = (cudaStream_t)p;
    return 0;
}

/* ---- the general path's reader of the fast path's kinds ---- */

/* read_device(obj, max_rank) -> None, or (ptr, shape, strides, device, stream): a torch CUDA tensor, a CuPy array
 * or a DeviceArray read by the fast path's own readers (read_torch, read_cupy, read_device_array), a matrix or,
 * where max_rank is 3, a stack of them; shape and strides (elements) of its rank, device its memory's GPU (checked
 * against its allocation where it is not empty), stream the one its producer names, as its interface would: a
 * DeviceArray's last writer, CuPy's current stream on the array's device (an int handle; 0 the legacy default
 * stream), None for torch (whose interface names none). None where they decline: another type, a dtype, rank or
 * layout they do not take, or memory its allocation does not hold. The general path then reads the object through
 * the interfaces, and says what is wrong. A DeviceArray's buffer is marked shared, as its interface marks it: the
 * general path may read it on any stream. */
PyObject *read_device(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "read_device(obj, max_rank) takes 2 arguments");
        return NULL;
    }
    module_state *st = get_state(module);
    fast_state *fs = &st->fast;
    if (fs->ndarray_type == NULL) return PyErr_Format(PyExc_SystemError, "read_device before register_fast_path");
    const long max_rank = PyLong_AsLong(args[1]);
    if (max_rank == -1 && PyErr_Occurred()) return NULL;
    operand op;
    stack_shape stack = {2, 1, 0};
    PyObject *stream = NULL;
    int status;
    const operand_kind kind = kind_of(fs, args[0]);
    switch (kind) {
    case KIND_TORCH: status = read_torch(st, args[0], &op, max_rank >= 3 ? 3 : 2, &stack); break;
    case KIND_CUPY: status = read_cupy(st, args[0], &op, max_rank >= 3 ? 3 : 2, &stack); break;
    case KIND_DEVICE_ARRAY: status = read_device_array(args[0], &op, &stream); break;
    default: Py_RETURN_NONE;
    }
    if (status != 0) {
        Py_XDECREF(stream);
        if (status < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (kind == KIND_DEVICE_ARRAY) {
        ((DeviceBuffer *)((const DeviceMatrix *)args[0])->buffer)->shared = 1;
    } else if (kind == KIND_CUPY) {
        // CuPy's interface names its current stream, which work on the array was ordered on: the general path
        // waits for it where it works on another stream (an operand of another kind chose it).
        cudaStream_t current;
        if (working_stream(fs, KIND_CUPY, op.device, Py_None, &current) < 0) return NULL;
        stream = PyLong_FromVoidPtr((void *)current);
        if (stream == NULL) return NULL;
    } else {
        stream = Py_NewRef(Py_None);
    }
    const fsg_matrix *m = &op.mat;
    PyObject *result =
        stack.rank == 2
            ? Py_BuildValue("K(LL)(LL)iN", (unsigned long long)(uintptr_t)m->ptr, (long long)m->rows,
                            (long long)m->cols, (long long)m->rs, (long long)m->cs, op.device, stream)
            : Py_BuildValue("K(LLL)(LLL)iN", (unsigned long long)(uintptr_t)m->ptr, (long long)stack.count,
                            (long long)m->rows, (long long)m->cols, (long long)stack.step, (long long)m->rs,
                            (long long)m->cs, op.device, stream);
    return result;
}

/* ---- the general path's result and stream: the same rules, from Python ---- */

/* The device a torch tensor or CuPy array says it is on (its memory's, which the general path may not have asked
 * the driver for: an empty array names no allocation). 0, or -1 with an exception set. */
static int framework_device(fast_state *fs, operand_kind kind, PyObject *obj, int *device) {
    PyObject *index = NULL;
    if (kind == KIND_TORCH) {
        index = PyObject_CallMethodNoArgs(obj, fs->s_get_device);
    } else {
        PyObject *data = PyObject_GetAttr(obj, fs->s_data);  // as read_cupy finds it
        if (data != NULL) index = PyObject_GetAttr(data, fs->s_device_id);
        Py_XDECREF(data);
    }
    if (index == NULL) return -1;
    const long value = PyLong_AsLong(index);
    Py_DECREF(index);
    if (value == -1 && PyErr_Occurred()) return -1;
    *device = (int)value;
    return 0;
}

/* stream_for(A, device, producer_stream) -> int: the stream device work runs on for a call whose A is the object
 * A (device: its memory's GPU, or -1 where the caller does not know it): torch's or CuPy's current stream of A's
 * device for theirs, the stream a DeviceArray was last written on, else the stream A's producer named
 * (producer_stream, an int or None), else the legacy default stream (0). working_stream's rules, for the general
 * path (python/fastsgemm/_operands.py). */
PyObject *stream_for(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "stream_for(A, device, producer_stream) takes 3 arguments");
        return NULL;
    }
    fast_state *fs = &get_state(module)->fast;
    if (fs->ndarray_type == NULL) return PyErr_Format(PyExc_SystemError, "stream_for before register_fast_path");
    const operand_kind kind = kind_of(fs, args[0]);
    int device = (int)PyLong_AsLong(args[1]);
    if (device == -1 && PyErr_Occurred()) return NULL;
    PyObject *a_stream = Py_None;
    if (kind == KIND_DEVICE_ARRAY) {
        const DeviceMatrix *matrix = (const DeviceMatrix *)args[0];
        if (matrix->stream != NULL) a_stream = matrix->stream;
    } else if ((kind == KIND_TORCH || kind == KIND_CUPY) && device < 0 && framework_device(fs, kind, args[0], &device) < 0) {
        return NULL;
    }
    cudaStream_t stream;
    const int status = kind == KIND_NUMPY ? 1 : working_stream(fs, kind, device, a_stream, &stream);
    if (status < 0) return NULL;
    if (status > 0) return args[2] == Py_None ? PyLong_FromLong(0) : Py_NewRef(args[2]);
    return PyLong_FromVoidPtr((void *)stream);
}

/* result_like(A, shape, device, stream) -> array: an uninitialised float32 result of `shape` for a call whose A is
 * the object A, on `device` (-1: host memory), as the fast path makes its own (new_result_of_shape): NumPy for
 * host calls, torch or CuPy for theirs, else a DeviceArray that remembers `stream` (an int or None) as its writer.
 * The caller checks that a DeviceArray result is a matrix. */
PyObject *result_like(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "result_like(A, shape, device, stream) takes 4 arguments");
        return NULL;
    }
    module_state *st = get_state(module);
    if (st->fast.ndarray_type == NULL) return PyErr_Format(PyExc_SystemError, "result_like before register_fast_path");
    const int device = (int)PyLong_AsLong(args[2]);
    if (device == -1 && PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "result_like: shape must be a tuple");
        return NULL;
    }
    return new_result_of_shape(st, kind_of(&st->fast, args[0]), args[0], device, args[1], args[3]);
}

/* The kernel a fast call runs, named by `name_obj`: "auto" (a GPU is needed:
 * without one the general path warns and runs the cpu rung) for `count`
 * m x n x k products on `device` (-1: host operands, the current device's
 * choice), or a rung's or configuration's name. 0, 1 (not for the fast path:
 * the general path says what is wrong), or -1 with an exception set. */
static int fast_kernel(fast_state *fs, PyObject *name_obj, int device, int64_t m, int64_t n, int64_t k,
                       int64_t count, kernel_choice *kernel) {
    if (fs->cuda_devices < 0) {
        int devices = 0;
        fs->cuda_devices = cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
        cudaGetLastError();
    }
    Py_ssize_t length;
    const char *name = PyUnicode_AsUTF8AndSize(name_obj, &length);
    if (name == NULL) return -1;
    if (length == 4 && memcmp(name, "auto", 4) == 0) {
        if (fs->cuda_devices == 0) return 1;
        int auto_device = device;
        if (auto_device < 0 && cudaGetDevice(&auto_device) != cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
        return auto_kernel(fs, auto_device, m, n, k, count, kernel);
    }
    if (kernel_by_name(name, length, kernel) != 0) return 1;  // the general path lists the valid names
    if (kernel->rung->device == FSG_DEVICE_CUDA && fs->cuda_devices == 0) return 1;  // it says there is no GPU
    return 0;
}

/* The working stream of a fast call (working_stream), checked for what the
 * result's allocation needs: cupy.empty allocates on the current device.
 * 0, 1 (not for the fast path), or -1 with an exception set. */
static int fast_stream(fast_state *fs, operand_kind kind, int device, PyObject *a_stream, cudaStream_t *stream) {
    const int status = working_stream(fs, kind, device, a_stream, stream);
    if (status != 0 || kind != KIND_CUPY) return status;
    int current;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) {
        cudaGetLastError();
        return 1;
    }
    return 0;
}

/* The legacy default stream has two spellings: 0 (runtime API) and 1 (the interfaces'). */
static cudaStream_t canonical_stream(cudaStream_t s) { return s == (cudaStream_t)1 ? (cudaStream_t)0 : s; }

PyObject *sgemm_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "sgemm_fast(A, B, C, out, alpha, beta, kernel) takes 7 arguments");
        return NULL;
    }
    // In a child forked after CUDA was initialized the fast path would ask the runtime before any check: the
    // general path runs instead (the cpu rung works there, a GPU call raises CudaError saying why).
    if (forked_child()) Py_RETURN_NOTIMPLEMENTED;
    module_state *st = get_state(module);
    fast_state *fs = &st->fast;
    PyObject *objs[4] = {args[0], args[1], args[3], args[2]}; /* a, b, out, c: run_gemm's order */
    PyObject *streams[4] = {NULL, NULL, NULL, NULL};
    PyObject *result = NULL, *answer = NULL;
    operand ops[4];
    int have[4] = {0, 0, 0, 0};
    double alpha, beta;
    if (real_of(args[4], &alpha) || real_of(args[5], &beta) || !PyUnicode_Check(args[6])) goto fallback;
    const int count = objs[3] == Py_None ? 3 : 4;
    if (beta != 0.0 && count == 3) goto fallback;

    const operand_kind kind = kind_of(fs, objs[0]);
    if (kind == KIND_OTHER) goto fallback;
    for (int i = 0; i < 4; ++i) {
        if (objs[i] == Py_None) continue;
        if ((i > 0 && kind_of(fs, objs[i]) != kind) || read_operand(st, kind, objs[i], i == 2, &ops[i], &streams[i]))
            goto fallback;
        have[i] = 1;
    }
    const int64_t m = ops[0].mat.rows, k = ops[0].mat.cols, n = ops[1].mat.cols;
    const int device = ops[0].device;
    if (ops[1].mat.rows != k) goto fallback;
    for (int i = 1; i < 4; ++i) {
        if (!have[i]) continue;
        if (ops[i].device != device) goto fallback;
        if (i >= 2 && (ops[i].mat.rows != m || ops[i].mat.cols != n)) goto fallback;
    }

    kernel_choice kernel;
    int status = fast_kernel(fs, args[6], device, m, n, k, 1, &kernel);
    if (status > 0) goto fallback;
    if (status < 0) goto error;
    cudaStream_t stream;
    status = fast_stream(fs, kind, device, streams[0], &stream);
    if (status > 0) goto fallback;
    if (status < 0) goto error;

    // From here on the call is the fast path's: errors are raised, not handed on.
    if (have[2]) {
        result = Py_NewRef(objs[2]);
    } else {
        PyObject *result_stream = Py_None;  // a DeviceArray result remembers the stream that writes it
        if (kind == KIND_DEVICE_ARRAY) result_stream = streams[0] == Py_None ? PyLong_FromLong(0) : Py_NewRef(streams[0]);
        else Py_INCREF(result_stream);
        if (result_stream == NULL) goto error;
        result = new_result(st, kind, objs[0], device, -1, m, n, result_stream);
        Py_DECREF(result_stream);
        if (result == NULL) goto error;
        PyObject *unused;
        status = read_operand(st, kind, result, 1, &ops[2], &unused);
        Py_XDECREF(unused);
        if (status != 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "fast path: cannot read the result it made");
            goto error;
        }
        have[2] = 1;
    }
    if (kind == KIND_DEVICE_ARRAY) {
        // A pooled buffer read on a stream the legacy default stream does not order must not be freed in that
        // order alone (device_buffer.c, "DeviceBuffer").
        for (int i = 0; i < 4; ++i) {
            if (objs[i] == Py_None && i != 2) continue;
            PyObject *buffer = ((const DeviceMatrix *)(i == 2 ? result : objs[i]))->buffer;  // read: bound
            device_buffer_read_on((DeviceBuffer *)buffer, stream);
        }
        // Wait for the last writers of the other operands, with an event made on the operands' GPU.
        for (int i = 1; i < 4; ++i) {
            if (streams[i] == NULL || streams[i] == Py_None) continue;
            void *producer = PyLong_AsVoidPtr(streams[i]);
            if (producer == NULL && PyErr_Occurred()) goto error;
            if (canonical_stream((cudaStream_t)producer) == canonical_stream(stream)) continue;
            saved_context previous;
            if (enter_device(st, device, &previous) < 0) goto error;
            const cudaError_t err = order_streams(stream, (cudaStream_t)producer);
            leave_device(&previous);
            if (err != cudaSuccess) {
                raise_cuda_error(st, err, "ordering two streams");
                goto error;
            }
        }
    }
    if (run_gemm(st, &kernel, ops, count, alpha, beta, stream) < 0) goto error;
    answer = result;
    result = NULL;
    goto cleanup;

fallback:
    answer = Py_NewRef(Py_NotImplemented);
    goto cleanup;
error:
    answer = NULL;
cleanup:
    Py_XDECREF(result);
    for (int i = 0; i < 4; ++i) {
        Py_XDECREF(streams[i]);
        if (have[i]) release_operand(&ops[i]);
    }
    return answer;
}

/* ---- matmul_fast(A, B, out, kernel): fastsgemm.matmul on stacks ---- */

/* Whether out's stack and an input's share any address: the general path then computes into a temporary. */
static int stacks_overlap(const operand *x, int64_t x_count, int64_t x_step, const operand *out, int64_t count,
                          int64_t out_step) {
    return fsg_stacks_overlap(&x->mat, x_count, x_step, &out->mat, count, out_step);
}

/* numpy.matmul on torch CUDA tensors or CuPy arrays of 2 or 3 dimensions, at
 * least one of them 3 (two matrices are sgemm_fast's): a stack of products,
 * read, checked and run in one C call (csrc/operands.c's fsg_run_batch: one
 * launch for a batched kernel). The stack dimension broadcasts as NumPy's
 * does (extent 1, or a missing dimension, is read in place for every
 * product); `out`, when given, has the result's shape exactly. Anything else
 * returns NotImplemented before anything is enqueued, and
 * python/fastsgemm/_matmul.py takes the call. */
PyObject *matmul_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "matmul_fast(A, B, out, kernel) takes 4 arguments");
        return NULL;
    }
    if (forked_child()) Py_RETURN_NOTIMPLEMENTED;  // as in sgemm_fast
    module_state *st = get_state(module);
    fast_state *fs = &st->fast;
    PyObject *objs[3] = {args[0], args[1], args[2]}; /* a, b, out */
    PyObject *result = NULL, *answer = NULL;
    operand ops[3];
    stack_shape stacks[3];
    int have[3] = {0, 0, 0};
    if (!PyUnicode_Check(args[3])) goto fallback;
    const operand_kind kind = kind_of(fs, objs[0]);
    if (kind != KIND_TORCH && kind != KIND_CUPY) goto fallback;
    for (int i = 0; i < 3; ++i) {
        if (i == 2 && objs[i] == Py_None) continue;
        if (kind_of(fs, objs[i]) != kind) goto fallback;
        const int status = kind == KIND_TORCH ? read_torch(st, objs[i], &ops[i], 3, &stacks[i])
                                              : read_cupy(st, objs[i], &ops[i], 3, &stacks[i]);
        if (status != 0) goto fallback;
        have[i] = 1;
    }
    if (stacks[0].rank == 2 && stacks[1].rank == 2) goto fallback;
    const int64_t m = ops[0].mat.rows, k = ops[0].mat.cols, n = ops[1].mat.cols;
    const int device = ops[0].device;
    if (ops[1].mat.rows != k || ops[1].device != device) goto fallback;  // the general path says what is wrong
    const int64_t count_a = stacks[0].count, count_b = stacks[1].count;
    const int64_t count = count_a == count_b || count_b == 1 ? count_a : count_a == 1 ? count_b : -1;
    if (count < 0) goto fallback;  // stacks that do not broadcast
    int64_t steps[3] = {count_a == 1 ? 0 : stacks[0].step, count_b == 1 ? 0 : stacks[1].step, m * n};
    if (!have[2]) {  // the result will be C-contiguous: as such it decides what auto is asked about
        memset(&ops[2], 0, sizeof ops[2]);
        ops[2].mat = (fsg_matrix){.rows = m, .cols = n, .rs = n, .cs = 1, .side = FSG_DEVICE};
    } else {
        if (stacks[2].rank != 3 || stacks[2].count != count || ops[2].mat.rows != m || ops[2].mat.cols != n ||
            ops[2].device != device)
            goto fallback;
        steps[2] = stacks[2].step;
        if (stacks_overlap(&ops[0], count, steps[0], &ops[2], count, steps[2]) ||
            stacks_overlap(&ops[1], count, steps[1], &ops[2], count, steps[2]))
            goto fallback;
    }
    int64_t problem[4];
    auto_problem_of_stack(ops, count, steps, problem);
    kernel_choice kernel;
    int status = fast_kernel(fs, args[3], device, problem[0], problem[1], problem[2], problem[3], &kernel);
    if (status > 0) goto fallback;
    if (status < 0) goto error;
    cudaStream_t stream;
    status = fast_stream(fs, kind, device, NULL, &stream);
    if (status > 0) goto fallback;
    if (status < 0) goto error;

    // From here on the call is the fast path's: errors are raised, not handed on.
    if (have[2]) {
        result = Py_NewRef(objs[2]);
    } else {
        result = new_result(st, kind, objs[0], device, count, m, n, Py_None);
        if (result == NULL) goto error;
        status = kind == KIND_TORCH ? read_torch(st, result, &ops[2], 3, &stacks[2])
                                    : read_cupy(st, result, &ops[2], 3, &stacks[2]);
        if (status != 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "fast path: cannot read the result it made");
            goto error;
        }
        have[2] = 1;
        steps[2] = stacks[2].step;
    }
    if (run_batch(st, &kernel, ops, count, steps, stream) < 0) goto error;
    answer = result;
    result = NULL;
    goto cleanup;

fallback:
    answer = Py_NewRef(Py_NotImplemented);
    goto cleanup;
error:
    answer = NULL;
cleanup:
    Py_XDECREF(result);
    for (int i = 0; i < 3; ++i)
        if (have[i]) release_operand(&ops[i]);
    return answer;
}

/* ---- linear_fast(input, weight, bias, kernel): fastsgemm.torch.Linear's product ---- */

/* input @ weight^T + bias for torch CUDA tensors that autograd does not record, in one C call: input of 2 or 3
 * dimensions whose rows are one matrix (merge_rows), weight an out x in matrix read transposed in place, bias a
 * 1-D tensor of `out` elements or None. The result is a new tensor of input's leading shape and `out` columns
 * (never a view), written by one product whose C is the bias, every row the same (a row stride of zero), with
 * beta = 1: each element is the product plus the bias rounded once, as adding the bias afterwards gives.
 * Anything else (host tensors, more dimensions, rows that do not merge, an empty K, shapes that disagree)
 * returns NotImplemented before anything is enqueued, and python/fastsgemm/torch.py takes the call. */
PyObject *linear_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "linear_fast(input, weight, bias, kernel) takes 4 arguments");
        return NULL;
    }
    if (forked_child()) Py_RETURN_NOTIMPLEMENTED;  // as in sgemm_fast
    module_state *st = get_state(module);
    fast_state *fs = &st->fast;
    PyObject *input = args[0], *weight = args[1], *bias = args[2], *result = NULL, *answer = NULL;
    operand ops[4]; /* a, b, out, c: run_gemm's order */
    int have[4] = {0, 0, 0, 0};
    stack_shape in_stack, weight_stack;
    if (!PyUnicode_Check(args[3]) || kind_of(fs, input) != KIND_TORCH || kind_of(fs, weight) != KIND_TORCH ||
        (bias != Py_None && kind_of(fs, bias) != KIND_TORCH))
        goto fallback;
    if (read_torch(st, input, &ops[0], 3, &in_stack)) goto fallback;
    have[0] = 1;
    if (read_torch(st, weight, &ops[1], 2, &weight_stack)) goto fallback;
    have[1] = 1;
    const int64_t count = in_stack.rank == 3 ? in_stack.count : -1, rows = ops[0].mat.rows;
    if (merge_rows(&ops[0], &in_stack)) goto fallback;
    // weight^T: weight's (out, in) read as (in, out), in place.
    fsg_matrix *w = &ops[1].mat;
    *w = (fsg_matrix){.ptr = w->ptr, .rows = w->cols, .cols = w->rows, .rs = w->cs, .cs = w->rs, .side = w->side};
    const int64_t m = ops[0].mat.rows, k = ops[0].mat.cols, n = w->cols;
    const int device = ops[0].device;
    if (w->rows != k || k == 0 || ops[1].device != device) goto fallback;
    if (bias != Py_None) {
        if (read_torch_row(st, bias, m, n, &ops[3]) || ops[3].device != device) goto fallback;
        have[3] = 1;
    }

    // An empty result is made and returned: no kernel, no stream.
    const bool work = m > 0 && n > 0;
    kernel_choice kernel;
    cudaStream_t stream = NULL;
    if (work) {
        int status = fast_kernel(fs, args[3], device, m, n, k, 1, &kernel);
        if (status > 0) goto fallback;
        if (status < 0) goto error;
        status = fast_stream(fs, KIND_TORCH, device, NULL, &stream);
        if (status > 0) goto fallback;
        if (status < 0) goto error;
    }

    // From here on the call is the fast path's: errors are raised, not handed on.
    result = new_result(st, KIND_TORCH, input, device, count, rows, n, Py_None);
    if (result == NULL) goto error;
    // new_empty made it: contiguous, on input's device, float32, its rows one m x n matrix. Only its address is
    // not known yet (reading it back whole cost a microsecond a call).
    PyObject *address = PyObject_CallMethodNoArgs(result, fs->s_data_ptr);
    int64_t out_ptr;
    const int unread = long_of(address, &out_ptr);
    Py_XDECREF(address);
    if (unread) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "fast path: cannot read the result it made");
        goto error;
    }
    set_device_matrix(&ops[2], out_ptr, m, n, n, 1, device);
    have[2] = 1;
    if (work && run_gemm(st, &kernel, ops, have[3] ? 4 : 3, 1.0, have[3] ? 1.0 : 0.0, stream) < 0) goto error;
    answer = result;
    result = NULL;
    goto cleanup;

fallback:
    answer = Py_NewRef(Py_NotImplemented);
    goto cleanup;
error:
    answer = NULL;
cleanup:
    Py_XDECREF(result);
    for (int i = 0; i < 4; ++i)
        if (have[i]) release_operand(&ops[i]);
    return answer;
}
