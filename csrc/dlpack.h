/*
 * dlpack.h: the parts of the DLPack ABI (v1.0, plus the pre-1.0 unversioned
 * tensor) that fastsgemm consumes and produces. Written from the published
 * specification; only the fields the extension touches are named.
 */
#ifndef FASTSGEMM_DLPACK_H
#define FASTSGEMM_DLPACK_H

#include <stdint.h>

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum { kDLFloat = 2 };

#define DLPACK_FLAG_BITMASK_READ_ONLY ((uint64_t)1 << 0)

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;

/* Unversioned (DLPack < 1.0): capsule name "dltensor". */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/* Versioned (DLPack >= 1.0): capsule name "dltensor_versioned". */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif /* FASTSGEMM_DLPACK_H */
