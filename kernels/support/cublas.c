/*
 * The yardsticks: cublas, cuBLAS SGEMM in true FP32, and cublas_tf32, the
 * same call on TF32 tensor cores.
 *
 * cublasGemmEx with CUBLAS_COMPUTE_32F never uses TF32 tensor cores (the
 * handle's math mode stays CUBLAS_DEFAULT_MATH), so `cublas` is the FP32
 * baseline every rung is measured against. CUBLAS_COMPUTE_32F_FAST_TF32 lets
 * cuBLAS round the operands to TF32: the speed and accuracy the tf32 rung is
 * compared with.
 * The 64-bit entry point takes dimensions and leading dimensions past 2^31.
 *
 * cuBLAS is column-major and D is row-major: a row-major m x n D is the
 * column-major n x m matrix D^T = B^T A^T. A row-major operand read as
 * column-major is already its transpose, so each operand's transpose flag
 * maps to CUBLAS_OP_N when it is row-major and CUBLAS_OP_T when it is not.
 *
 * cuBLAS updates C in place; when the caller wants D != C, C is first copied
 * into D on the same stream. A batch (ladder.h) is one strided-batched call
 * (product by product where a C other than D must be copied first).
 *
 * Handles: one per host thread and device, created on first use and destroyed
 * when the thread ends, so concurrent callers never share a handle. The main
 * thread's is destroyed at interpreter exit (fsg_cublas_release_thread_handle,
 * registered with atexit by the package): thread-exit destructors never run
 * for the main thread.
 *
 * cuBLAS itself is opened with dlopen on first use, not linked: the module
 * then imports, and every other rung runs, where cuBLAS is missing; a wheel
 * names no library outside the manylinux set; and the import does not map
 * cuBLAS's 100+ MB. It is the file FASTSGEMM_CUBLAS_LIBRARY names, where that
 * is set; else it is looked for in the directories the package names
 * (fsg_cublas_search_dirs: the nvidia-cublas wheel's, found by Python), in
 * the Toolkit the module was built with (FSG_TOOLKIT_LIB_DIR, set by
 * setup.py), then by the dynamic loader's own search (LD_LIBRARY_PATH, the
 * system's cache).
 */
#define _GNU_SOURCE  // dladdr
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>

#include "ladder.h"
#include "support/device_memory.h"

#define FSG_STRINGIFY_(x) #x
#define FSG_STRINGIFY(x) FSG_STRINGIFY_(x)
/* The major version of the headers this file was compiled with: the one whose symbols it asks for. */
#define CUBLAS_SONAME "libcublas.so." FSG_STRINGIFY(CUBLAS_VER_MAJOR)

/* The cuBLAS entry points fastsgemm calls (cublas_v2.h's macros name the _v2 ones). */
static struct {
    __typeof__(cublasCreate) *create;
    __typeof__(cublasDestroy) *destroy;
    __typeof__(cublasSetStream) *set_stream;
    __typeof__(cublasSetWorkspace) *set_workspace;
    __typeof__(cublasSetMathMode) *set_math_mode;
    __typeof__(cublasGemmEx_64) *gemm;
    __typeof__(cublasGemmStridedBatchedEx_64) *gemm_strided_batched;
} cublas;

enum { kMaxSearchDirs = 8 };
/* Set from Python at import, read by the first load, which may run on any thread with the GIL released. */
static pthread_mutex_t search_lock = PTHREAD_MUTEX_INITIALIZER;
static char *search_dirs[kMaxSearchDirs];
static int search_dir_count;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;
static char load_failure[5120];
static char loaded_from[4096];

int fsg_cublas_search_dirs(const char *const *dirs, int count) {
    if (count > kMaxSearchDirs) count = kMaxSearchDirs;
    int status = 0;
    pthread_mutex_lock(&search_lock);
    for (int i = 0; i < search_dir_count; ++i) free(search_dirs[i]);
    search_dir_count = 0;
    for (int i = 0; i < count && status == 0; ++i) {
        const size_t length = strlen(dirs[i]) + 1;
        search_dirs[i] = malloc(length);
        if (search_dirs[i] == NULL) {
            status = -1;
            break;
        }
        memcpy(search_dirs[i], dirs[i], length);
        search_dir_count = i + 1;
    }
    pthread_mutex_unlock(&search_lock);
    return status;
}

/* An attempt at one candidate file. A file that exists but will not load (its libcublasLt missing, a glibc too
 * old) is the reason worth reporting, so the first such dlerror is kept; a missing file only says where we looked. */
typedef struct attempt {
    char why[768];
    char looked[256];
} attempt;

static void *open_file(const char *path, attempt *tried) {
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library != NULL) {
        snprintf(loaded_from, sizeof loaded_from, "%s", path);
        return library;
    }
    const char *why = dlerror();
    if (tried->why[0] == '\0' && access(path, F_OK) == 0) snprintf(tried->why, sizeof tried->why, "%s", why);
    return NULL;
}

/* Opens `where`/CUBLAS_SONAME. */
static void *open_in(const char *where, attempt *tried) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", where, CUBLAS_SONAME) >= (int)sizeof path) return NULL;
    const size_t used = strlen(tried->looked);
    snprintf(tried->looked + used, sizeof tried->looked - used, "%s%s", used > 0 ? ", " : "", where);
    return open_file(path, tried);
}

/* The directory of the library `handle` was opened from (the loader's own search names no path). */
static void record_origin(void *handle) {
    Dl_info info;
    void *symbol = dlsym(handle, "cublasCreate_v2");
    if (loaded_from[0] == '\0' && symbol != NULL && dladdr(symbol, &info) != 0 && info.dli_fname != NULL)
        snprintf(loaded_from, sizeof loaded_from, "%s", info.dli_fname);
}

static void *find_library(attempt *tried) {
    const char *chosen = getenv("FASTSGEMM_CUBLAS_LIBRARY");  // the user's own cuBLAS, and no other
    if (chosen != NULL && chosen[0] != '\0') {
        void *library = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
        if (library == NULL) {
            const char *why = dlerror();
            snprintf(tried->why, sizeof tried->why, "FASTSGEMM_CUBLAS_LIBRARY=%s: %s", chosen,
                     why != NULL ? why : "cannot be opened");
        }
        return library;
    }
    // One already in the process (torch's, say) is shared rather than loaded twice.
    void *library = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    pthread_mutex_lock(&search_lock);
    for (int i = 0; i < search_dir_count && library == NULL; ++i) library = open_in(search_dirs[i], tried);
    pthread_mutex_unlock(&search_lock);
#ifdef FSG_TOOLKIT_LIB_DIR
    if (library == NULL) library = open_in(FSG_TOOLKIT_LIB_DIR, tried);
#endif
    if (library == NULL) {  // LD_LIBRARY_PATH, the system's cache
        library = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
        const char *why = library == NULL ? dlerror() : NULL;
        if (library == NULL && tried->why[0] == '\0')
            snprintf(tried->why, sizeof tried->why, "%s (looked in: %s, and the system's loader search)",
                     why != NULL ? why : CUBLAS_SONAME " not found", tried->looked[0] ? tried->looked : "-");
    }
    return library;
}

static void load_cublas(void) {
    attempt tried = {{0}, {0}};
    void *library = find_library(&tried);
    if (library == NULL) {
        snprintf(load_failure, sizeof load_failure, "%s", tried.why);
        return;
    }
    record_origin(library);
    const char *missing = NULL;
#define FSG_RESOLVE(field, symbol)                        \
    if (missing == NULL) {                                \
        *(void **)&cublas.field = dlsym(library, symbol); \
        if (cublas.field == NULL) missing = symbol;       \
    }
    FSG_RESOLVE(create, "cublasCreate_v2")
    FSG_RESOLVE(destroy, "cublasDestroy_v2")
    FSG_RESOLVE(set_stream, "cublasSetStream_v2")
    FSG_RESOLVE(set_workspace, "cublasSetWorkspace_v2")
    FSG_RESOLVE(set_math_mode, "cublasSetMathMode")
    FSG_RESOLVE(gemm, "cublasGemmEx_64")
    FSG_RESOLVE(gemm_strided_batched, "cublasGemmStridedBatchedEx_64")
#undef FSG_RESOLVE
    // The same names exist in cuBLAS 12 and 13: a library of the other major version would load and misbehave.
    __typeof__(cublasGetProperty) *get_property = NULL;
    *(void **)&get_property = dlsym(library, "cublasGetProperty");
    int major = -1;
    if (missing == NULL && (get_property == NULL || get_property(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS))
        missing = "cublasGetProperty";
    if (missing != NULL)
        snprintf(load_failure, sizeof load_failure, "%s has no %s (an older cuBLAS?)", loaded_from, missing);
    else if (major != CUBLAS_VER_MAJOR)
        snprintf(load_failure, sizeof load_failure, "%s is cuBLAS %d; this build needs cuBLAS %d", loaded_from,
                 major, CUBLAS_VER_MAJOR);
    if (missing != NULL || major != CUBLAS_VER_MAJOR) {
        dlclose(library);
        return;
    }
    loaded = 1;  // kept open for the life of the process
}

/* cudaSuccess once cuBLAS is loaded; else cudaErrorSharedObjectInitFailed, and fsg_cublas_load_failure says why. */
static cudaError_t cublas_loaded(void) {
    if (pthread_once(&load_once, load_cublas) != 0) return cudaErrorUnknown;
    return loaded ? cudaSuccess : cudaErrorSharedObjectInitFailed;
}

const char *fsg_cublas_load_failure(void) { return loaded || load_failure[0] == '\0' ? NULL : load_failure; }

const char *fsg_cublas_library(void) { return cublas_loaded() == cudaSuccess ? loaded_from : NULL; }

typedef struct thread_handle {
    cublasHandle_t handle;
    void *workspace; /* the handle's own workspace (kWorkspaceBytes), set with cublasSetWorkspace */
    int device;
} thread_handle;

/* A workspace of our own for each handle: cuBLAS then never allocates one
 * during a call, which a CUDA graph capture would forbid, and keeps no
 * per-call workspace bookkeeping. 32 MiB is what cuBLAS asks for on Hopper. */
enum { kWorkspaceBytes = 32 << 20 };

static pthread_key_t handle_key;
static pthread_once_t handle_key_once = PTHREAD_ONCE_INIT;

/* Frees a handle's workspace, counted in fastsgemm's device memory while it lived. */
static void free_workspace(thread_handle *th) {
    if (th->workspace == NULL) return;
    if (cudaFree(th->workspace) == cudaSuccess) fsg_memory_give(th->device, kWorkspaceBytes);
    else (void)cudaGetLastError();  // left allocated, and counted
    th->workspace = NULL;
}

static void destroy_thread_handle(void *p) {
    thread_handle *th = p;
    // On the handle's own GPU: the thread (ending, or the main thread at exit) may have no context current, and
    // the runtime would otherwise make one on its default GPU, which the process may never have used.
    if (cudaSetDevice(th->device) != cudaSuccess) (void)cudaGetLastError();
    cublas.destroy(th->handle);  // at thread exit there is no one to tell of a failure
    free_workspace(th);
    free(th);
}

static void make_handle_key(void) { pthread_key_create(&handle_key, destroy_thread_handle); }

static cudaError_t cuda_error_of(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNoKernelImageForDevice;
    case CUBLAS_STATUS_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: {
        // Execution and initialisation failures usually come from CUDA itself.
        cudaError_t last = cudaGetLastError();
        return last != cudaSuccess ? last : cudaErrorUnknown;
    }
    }
}

/* This thread's handle for the current device, made on first use. */
static cudaError_t get_handle(cublasHandle_t *out) {
    cudaError_t err = cublas_loaded();
    if (err != cudaSuccess) return err;
    int device;
    err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (pthread_once(&handle_key_once, make_handle_key) != 0) return cudaErrorUnknown;

    thread_handle *th = pthread_getspecific(handle_key);
    if (th != NULL && th->device == device) {
        *out = th->handle;
        return cudaSuccess;
    }
    if (th == NULL) {
        th = calloc(1, sizeof *th);
        if (th == NULL) return cudaErrorMemoryAllocation;
    } else {
        cublas.destroy(th->handle);  // made for another device
        th->handle = NULL;
        free_workspace(th);
    }
    th->device = device;
    // Creating a handle and its workspace allocates device memory. A first call made inside a stream capture
    // (torch.cuda.graph) would have that invalidate the capture in its default mode; relaxed mode lets this
    // thread's allocations through without them joining the graph. The mode is this thread's, restored after.
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cublasStatus_t s = cublas.create(&th->handle);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublas.set_math_mode(th->handle, CUBLAS_DEFAULT_MATH);
    cudaError_t alloc = s == CUBLAS_STATUS_SUCCESS ? fsg_memory_take(device, kWorkspaceBytes) : cudaSuccess;
    if (s == CUBLAS_STATUS_SUCCESS && alloc == cudaSuccess) {
        alloc = cudaMalloc(&th->workspace, kWorkspaceBytes);
        if (alloc != cudaSuccess) fsg_memory_give(device, kWorkspaceBytes);
    }
    if (alloc != cudaSuccess) th->workspace = NULL;
    if (s == CUBLAS_STATUS_SUCCESS && th->workspace != NULL)
        s = cublas.set_workspace(th->handle, th->workspace, kWorkspaceBytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (s != CUBLAS_STATUS_SUCCESS || alloc != cudaSuccess) {
        if (th->handle != NULL) cublas.destroy(th->handle);
        free_workspace(th);
        free(th);
        pthread_setspecific(handle_key, NULL);
        return alloc != cudaSuccess ? alloc : cuda_error_of(s);
    }
    pthread_setspecific(handle_key, th);
    *out = th->handle;
    return cudaSuccess;
}

void fsg_cublas_release_thread_handle(void) {
    if (pthread_once(&handle_key_once, make_handle_key) != 0) return;
    thread_handle *th = pthread_getspecific(handle_key);
    if (th == NULL) return;
    pthread_setspecific(handle_key, NULL);
    destroy_thread_handle(th);
}

/* batch: NULL for one product. */
static cudaError_t cublas_gemm(const fsg_gemm *g, const fsg_batch *batch, cublasComputeType_t compute,
                               cudaStream_t stream) {
    if (g->k_slice != 0) return cudaErrorInvalidValue;  // cuBLAS splits K (or not) by itself: never given slices
    if (batch != NULL && g->c != NULL && (g->c != g->d || batch->step_c != batch->step_d))
        return fsg_each_product(g, batch, stream, compute == CUBLAS_COMPUTE_32F ? fsg_cublas_sgemm : fsg_cublas_tf32_sgemm);
    cublasHandle_t handle = NULL;
    cudaError_t err = get_handle(&handle);
    if (err != cudaSuccess) return err;

    if (g->c != NULL && g->c != g->d) {
        err = fsg_copy_matrix_cuda(g->d, g->ldd, 1, g->c, g->ldc, 1, g->m, g->n, stream);
        if (err != cudaSuccess) return err;
    }
    cublasStatus_t s = cublas.set_stream(handle, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return cuda_error_of(s);

    const float beta = g->c != NULL ? g->beta : 0.0f;
    const cublasOperation_t op_b = g->b_trans ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g->a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch != NULL)  // one call for the whole stack: a shared operand has step 0
        s = cublas.gemm_strided_batched(handle, op_b, op_a, g->n, g->m, g->k, &g->alpha, g->b, CUDA_R_32F, g->ldb,
                                        batch->step_b, g->a, CUDA_R_32F, g->lda, batch->step_a, &beta, g->d,
                                        CUDA_R_32F, g->ldd, batch->step_d, batch->count, compute, CUBLAS_GEMM_DEFAULT);
    else
        s = cublas.gemm(handle, op_b, op_a, g->n, g->m, g->k, &g->alpha, g->b, CUDA_R_32F, g->ldb, g->a, CUDA_R_32F,
                        g->lda, &beta, g->d, CUDA_R_32F, g->ldd, compute, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return cuda_error_of(s);
    return cudaGetLastError();
}

cudaError_t fsg_cublas_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return cublas_gemm(g, NULL, CUBLAS_COMPUTE_32F, stream);
}

cudaError_t fsg_cublas_tf32_sgemm(const fsg_gemm *g, cudaStream_t stream) {
    return cublas_gemm(g, NULL, CUBLAS_COMPUTE_32F_FAST_TF32, stream);
}

cudaError_t fsg_cublas_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return cublas_gemm(g, batch, CUBLAS_COMPUTE_32F, stream);
}

cudaError_t fsg_cublas_tf32_batch_sgemm(const fsg_gemm *g, const fsg_batch *batch, cudaStream_t stream) {
    return cublas_gemm(g, batch, CUBLAS_COMPUTE_32F_FAST_TF32, stream);
}
