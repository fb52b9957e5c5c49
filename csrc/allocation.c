/*
 * allocation.c: a device operand may claim only memory its pointer's
 * allocation holds.
 *
 * A __cuda_array_interface__, a DLPack tensor or sgemm_raw's arguments are a
 * pointer plus a shape and strides, and nothing stops them from describing
 * more than the memory behind the pointer. A kernel that followed such a
 * description would write into a neighbouring allocation, or fault and take
 * the process's CUDA context with it. So before any work is queued, each
 * device operand's byte span (every element it names, negative strides
 * included) is checked against the allocation the driver says its pointer
 * belongs to: one cuPointerGetAttributes call, which also gives the device
 * (the general path made it anyway, as cudaPointerGetAttributes), and one
 * cuMemGetAddressRange per mapped piece the span crosses (one for ordinary
 * memory; see all_mapped), asked on the operand's own GPU.
 *
 * The driver is reached through the runtime's entry-point query
 * (csrc/device_context.c), so the extension still imports where there is no
 * driver at all (CI).
 *
 * What this cannot see: allocators that carve many arrays out of one
 * cudaMalloc (PyTorch's and CuPy's pools). A view that stays inside its
 * pool's allocation but runs over a neighbouring array of the same pool is
 * within bounds as far as the driver knows (docs/guarantees.md).
 */
#include "extension.h"

#include <cuda.h>
#include <stdbool.h>

typedef CUresult (*pointer_attributes_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

/* Written once, under the GIL. */
static pointer_attributes_fn pointer_attributes;
static address_range_fn address_range;

/* Whether every byte of [first, last) is mapped: the driver's allocation
 * range is a whole reservation for memory mapped with cuMemMap (PyTorch's
 * expandable segments reserve about the GPU's memory and map it piece by
 * piece), so the mapped pieces are walked. One call for ordinary memory.
 * CUDA_SUCCESS with *mapped set, or the driver's error where the question
 * could not be answered (no usable context, a context lost to a sticky
 * error); CUDA_ERROR_INVALID_VALUE and CUDA_ERROR_NOT_FOUND are an address
 * the driver has nothing mapped at. */
static CUresult all_mapped(CUdeviceptr first, CUdeviceptr last, bool *mapped) {
    *mapped = false;
    for (CUdeviceptr at = first; at < last;) {
        CUdeviceptr piece;
        size_t size = 0;
        const CUresult result = address_range(&piece, &size, at);
        // The driver's answers for an address with nothing mapped; any other refusal is the question failing (a
        // lost context answers CUDA_ERROR_ILLEGAL_ADDRESS, sticky, and must be reported as that, not as the
        // operand's fault).
        if (result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_NOT_FOUND) return CUDA_SUCCESS;
        if (result != CUDA_SUCCESS) return result;
        if (size == 0) return CUDA_SUCCESS;
        at = piece + size;
    }
    *mapped = true;
    return CUDA_SUCCESS;
}

/* The first and one-past-last byte offsets from m->ptr that a stack of
 * `count` matrices m, `step` elements apart, names, or -1 when they do not
 * fit in 64 bits (a description no memory can hold). */
static int byte_extent(const fsg_matrix *m, int64_t count, int64_t step, int64_t *first, int64_t *last) {
    int64_t down, across, along;
    if (__builtin_mul_overflow(m->rows - 1, m->rs, &down) || __builtin_mul_overflow(m->cols - 1, m->cs, &across) ||
        __builtin_mul_overflow(count - 1, step, &along))
        return -1;
    int64_t lo, hi;
    if (__builtin_add_overflow(down < 0 ? down : 0, across < 0 ? across : 0, &lo) ||
        __builtin_add_overflow(lo, along < 0 ? along : 0, &lo) ||
        __builtin_add_overflow(down > 0 ? down : 0, across > 0 ? across : 0, &hi) ||
        __builtin_add_overflow(hi, along > 0 ? along : 0, &hi) ||
        __builtin_mul_overflow(lo, (int64_t)sizeof(float), first) || __builtin_add_overflow(hi, 1, &hi) ||
        __builtin_mul_overflow(hi, (int64_t)sizeof(float), last))
        return -1;
    return 0;
}

/* How a stack of count matrices `step` elements apart is named in messages ("" for one matrix). */
static void describe_stack(int64_t count, int64_t step, char *text, size_t size) {
    if (count > 1) snprintf(text, size, "%lld matrices %lld elements apart, each of ", (long long)count, (long long)step);
    else text[0] = '\0';
}

/* ValueError for a span [from, to) (bytes from the allocation's base) that
 * the allocation cannot hold; returns -1. */
static int refuse_span(const char *name, const fsg_matrix *m, int64_t count, int64_t step, int64_t from, int64_t to,
                       const char *why, size_t size, CUdeviceptr base) {
    char stack[96];
    describe_stack(count, step, stack, sizeof stack);
    PyErr_Format(PyExc_ValueError,
                 "%s: %sshape (%lld, %lld) with strides (%lld, %lld) elements from pointer %p reaches bytes "
                 "[%lld, %lld) %s %zu bytes (at %p): the operand claims memory it does not have",
                 name, stack, (long long)m->rows, (long long)m->cols, (long long)m->rs, (long long)m->cs,
                 (void *)m->ptr, (long long)from, (long long)to, why, size, (void *)(uintptr_t)base);
    return -1;
}

int check_device_operand(module_state *st, const fsg_matrix *m, const char *name, int *device) {
    return check_device_stack(st, m, 1, 0, name, device);
}

int check_device_stack(module_state *st, const fsg_matrix *m, int64_t count, int64_t step, const char *name,
                       int *device) {
    if (refuse_in_forked_child(st) < 0) return -1;
    const uintptr_t ptr = (uintptr_t)m->ptr;
    if (ptr % sizeof(float) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: device pointer %p is not 4-byte aligned", name, (void *)ptr);
        return -1;
    }
    if (pointer_attributes == NULL) pointer_attributes = (pointer_attributes_fn)driver_function("cuPointerGetAttributes");
    if (address_range == NULL) address_range = (address_range_fn)driver_function("cuMemGetAddressRange");
    if (pointer_attributes == NULL || address_range == NULL) {
        raise_cuda_error(st, cudaErrorNoDevice, "looking up the driver's cuPointerGetAttributes");
        return -1;
    }
    unsigned int memory_type = 0;
    int ordinal = -1;
    CUdeviceptr base = 0;
    size_t size = 0;
    unsigned long long managed = 0;  // a boolean; wide, whatever width the driver writes
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *values[] = {&memory_type, &managed, &ordinal, &base, &size};
    const CUresult result = pointer_attributes(5, which, values, (CUdeviceptr)ptr);
    if (result != CUDA_SUCCESS) {
        // Driver and runtime share the numbering of the errors this call can return.
        raise_cuda_error(st, (cudaError_t)result, "cuPointerGetAttributes");
        return -1;
    }
    // Pointers the driver does not know report type 0 and size 0; pinned host memory reports the host type.
    if ((memory_type != CU_MEMORYTYPE_DEVICE && managed == 0) || size == 0) {
        PyErr_Format(PyExc_ValueError, "%s: pointer %p is not CUDA device or managed memory", name, (void *)ptr);
        return -1;
    }
    int64_t first, last;
    const uintptr_t end = (uintptr_t)base + size;
    if (byte_extent(m, count, step, &first, &last) < 0) {
        char stack[96];
        describe_stack(count, step, stack, sizeof stack);
        PyErr_Format(PyExc_ValueError,
                     "%s: %sshape (%lld, %lld) with strides (%lld, %lld) elements spans more bytes than 64 bits "
                     "can count; its allocation holds %zu bytes",
                     name, stack, (long long)m->rows, (long long)m->cols, (long long)m->rs, (long long)m->cs, size);
        return -1;
    }
    // As offsets from the allocation's base: the pointer's own offset is bounded by the address space, and a
    // sum that overflows is out of bounds anyway (reported as the widest span).
    const int64_t into = (int64_t)(ptr - (uintptr_t)base);
    int64_t from, to;
    if (__builtin_add_overflow(into, first, &from)) from = INT64_MIN;
    if (__builtin_add_overflow(into, last, &to)) to = INT64_MAX;
    if (ptr < (uintptr_t)base || ptr >= end || from < 0 || to > (int64_t)size) {
        return refuse_span(name, m, count, step, from, to, "of its allocation, which holds", size, base);
    }
    // cuMemGetAddressRange looks in the calling thread's current context only: the operand's GPU's context is
    // made current first, also on a thread where none is (a new thread, torch's autograd worker).
    saved_context previous;
    if (enter_device(st, ordinal, &previous) < 0) return -1;
    bool mapped;
    const CUresult result_mapped =
        all_mapped((CUdeviceptr)base + (CUdeviceptr)from, (CUdeviceptr)base + (CUdeviceptr)to, &mapped);
    leave_device(&previous);
    if (result_mapped != CUDA_SUCCESS) {
        raise_cuda_error(st, (cudaError_t)result_mapped, "cuMemGetAddressRange");
        return -1;
    }
    if (!mapped) {
        return refuse_span(name, m, count, step, from, to, "not all mapped, of its address range of", size, base);
    }
    *device = ordinal;
    return 0;
}
