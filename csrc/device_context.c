/*
 * device_context.c: the calling thread's CUDA context, made right for a call
 * and put back afterwards.
 *
 * The runtime API makes a device's primary context current on a thread the
 * first time that thread does runtime work. The driver API does not: on a
 * thread where nothing has made a context current (a new Python thread, a
 * pool's worker, torch's autograd worker before its first kernel), driver
 * calls that look in "the current context" answer as if no memory existed.
 * And cudaGetDevice on such a thread still says 0, so asking the runtime
 * which device is current cannot tell that nothing is.
 *
 * So every call that works on a device first asks the driver for the
 * thread's context. When it belongs to the wanted device it is used as it is
 * (a context the caller made with the driver API stays in charge); otherwise
 * the device's primary context, the one the runtime and the frameworks use,
 * is made current, and the thread's own context (possibly none) is put back
 * when the call is done.
 *
 * The driver is reached through the runtime's entry-point query, so the
 * extension imports where there is no driver at all (CI).
 */
#include "extension.h"

#include <cuda.h>
#include <dlfcn.h>

void *driver_function(const char *name) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
        fn = NULL;
    cudaGetLastError();
    return fn;
}

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*primary_retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*context_get_fn)(CUcontext *);
typedef CUresult (*context_set_fn)(CUcontext);
typedef CUresult (*context_device_fn)(CUdevice *);

/* Looked up on first use, under the GIL (each is a word, written with the same value by any thread that races). */
static init_fn driver_init;
static device_get_fn device_get;
static primary_retain_fn primary_retain;
static context_get_fn context_get;
static context_set_fn context_set;
static context_device_fn context_device;

/* Each device's primary context, retained once for the life of the process as the runtime does itself, so
 * that making it current needs no runtime call: cudaSetDevice would also move the runtime's idea of the
 * thread's device, which putting the old context back cannot undo. */
enum { kMaxDevices = 64 };

/* Set in a child forked after CUDA was initialized: the child inherits the parent's memory but not its GPU state,
 * and the driver's behaviour there is undefined (an error, a hang), so nothing in it calls CUDA at all. */
static int forked_after_cuda;
static CUcontext primary[kMaxDevices];

static int have_driver_functions(void) {
    if (driver_init == NULL) driver_init = (init_fn)driver_function("cuInit");
    if (device_get == NULL) device_get = (device_get_fn)driver_function("cuDeviceGet");
    if (primary_retain == NULL) primary_retain = (primary_retain_fn)driver_function("cuDevicePrimaryCtxRetain");
    if (context_get == NULL) context_get = (context_get_fn)driver_function("cuCtxGetCurrent");
    if (context_set == NULL) context_set = (context_set_fn)driver_function("cuCtxSetCurrent");
    if (context_device == NULL) context_device = (context_device_fn)driver_function("cuCtxGetDevice");
    return driver_init != NULL && device_get != NULL && primary_retain != NULL && context_get != NULL &&
           context_set != NULL && context_device != NULL;
}

/* `device`'s primary context, retained on first use: CUDA_SUCCESS, or the driver's error. */
static CUresult primary_context(int device, CUcontext *context) {
    if (primary[device] != NULL) {
        *context = primary[device];
        return CUDA_SUCCESS;
    }
    CUdevice handle;
    CUresult result = driver_init(0);  // the runtime does this on its first call; this may be the process's first
    if (result == CUDA_SUCCESS) result = device_get(&handle, device);
    if (result == CUDA_SUCCESS) result = primary_retain(context, handle);
    if (result == CUDA_SUCCESS) primary[device] = *context;
    return result;
}

cudaError_t switch_device(int device, saved_context *saved) {
    saved->context = NULL;
    saved->switched = 0;
    saved->runtime_device = -1;
    if (device < 0) return cudaSuccess;
    if (forked_after_cuda) return cudaErrorInitializationError;
    if (device >= kMaxDevices || !have_driver_functions()) {
        // No driver to ask (none installed, or too old to answer), or more GPUs than remembered: the runtime's
        // own switch, its own error where there is no device, and the runtime's device put back after.
        int current = -1;
        cudaError_t err = cudaGetDevice(&current);
        if (err == cudaSuccess && current != device) {
            err = cudaSetDevice(device);
            if (err == cudaSuccess) saved->runtime_device = current;
        }
        if (err != cudaSuccess) cudaGetLastError();
        return err;
    }
    // Driver and runtime share the numbering of the errors these calls return.
    CUcontext current = NULL;
    CUresult result = context_get(&current);
    if (result != CUDA_SUCCESS) return (cudaError_t)result;
    if (current != NULL) {
        CUdevice on = -1;
        result = context_device(&on);
        if (result != CUDA_SUCCESS) return (cudaError_t)result;
        if (on == device) return cudaSuccess;  // a context of this device is current already: the caller's, kept
    }
    CUcontext wanted;
    result = primary_context(device, &wanted);
    if (result == CUDA_SUCCESS) result = context_set(wanted);
    if (result != CUDA_SUCCESS) return (cudaError_t)result;
    saved->context = current;
    saved->switched = 1;
    return cudaSuccess;
}

int enter_device(module_state *st, int device, saved_context *saved) {
    saved->context = NULL;
    saved->switched = 0;
    saved->runtime_device = -1;
    if (device >= 0 && refuse_in_forked_child(st) < 0) return -1;  // host work (the cpu rung) runs in any child
    const cudaError_t err = switch_device(device, saved);
    if (err == cudaSuccess) return 0;
    char what[96];
    snprintf(what, sizeof what, "making a context of device %d current on the calling thread", device);
    raise_cuda_error(st, err, what);
    return -1;
}

void leave_device(const saved_context *saved) {
    // The caller's context back, or none where it had none: the thread is left as it was found.
    if (saved->switched) context_set((CUcontext)saved->context);
    if (saved->runtime_device >= 0 && cudaSetDevice(saved->runtime_device) != cudaSuccess) cudaGetLastError();
}

/* ---- a process forked after CUDA was initialized ---- */

int cuda_initialized(void) {
    if (forked_after_cuda) return 1;  // a child of such a child inherits the parent's state: the driver is not asked
    // Asked before a fork, so it must not initialize anything: the driver is looked at only where it is loaded
    // already, and every call but cuInit answers CUDA_ERROR_NOT_INITIALIZED until cuInit has run.
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (driver == NULL) return 0;
    CUresult (*count_devices)(int *) = (CUresult(*)(int *))dlsym(driver, "cuDeviceGetCount");
    int count = 0;
    const int initialized = count_devices != NULL && count_devices(&count) != CUDA_ERROR_NOT_INITIALIZED;
    dlclose(driver);
    return initialized;
}

int driver_version(void) {
    // Straight from the driver library: the runtime's cudaDriverGetVersion initializes the driver on its way, and
    // `import fastsgemm` asks this, so a process that imports fastsgemm could no longer fork safely.
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == NULL) return 0;
    CUresult (*get_version)(int *) = (CUresult(*)(int *))dlsym(driver, "cuDriverGetVersion");
    int version = 0;
    if (get_version == NULL || get_version(&version) != CUDA_SUCCESS) version = 0;
    dlclose(driver);
    return version;
}

void mark_forked_after_cuda(void) { forked_after_cuda = 1; }

int forked_child(void) { return forked_after_cuda; }

int refuse_in_forked_child(module_state *st) {
    if (!forked_after_cuda) return 0;
    PyErr_SetString(st->cuda_error,
                    "fastsgemm: this process was forked from one that had already initialized CUDA, and CUDA cannot "
                    "be used in such a child. Start worker processes with multiprocessing's 'spawn' or "
                    "'forkserver' method (multiprocessing.get_context('spawn')), or fork before the first CUDA call");
    return -1;
}
