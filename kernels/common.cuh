/*
 * common.cuh: the plumbing every CUDA rung needs from rung 1 on, and nothing
 * else: tile counts, element offsets for both layouts, the index type,
 * split-K's slices, the epilogue, the layout dispatch and the launch. No idea
 * of the ladder lives here: each is written in the rung that introduces it
 * (kernels/ladder/), and the rungs after it copy it forward.
 */
#ifndef FASTSGEMM_COMMON_CUH
#define FASTSGEMM_COMMON_CUH

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "ladder.h"
#include "support/smem_limit.h"

namespace fsg {

/* Number of tiles of size `tile` needed to cover `n` elements. */
__host__ __device__ constexpr int64_t ceil_div(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }


/* Offset of element (r, c) of a matrix stored row-major (TRANS == false) or
 * column-major (TRANS == true) with leading dimension ld, in the kernel's
 * index type (see offsets_fit_int32). */
template <bool TRANS, typename Index>
__device__ __forceinline__ Index at(Index r, Index c, Index ld) {
    return TRANS ? c * ld + r : r * ld + c;
}

/* Kernels index with 32-bit integers when every offset they can form fits,
 * and with 64-bit ones otherwise (m * lda may pass 2^31 elements). It matters:
 * nvcc unrolls and schedules 32-bit index loops much better (2x on rung 2,
 * benchmarks/NOTES.md). kIndexMargin covers the rows and columns a tile may
 * overhang past a matrix's edge, whose offsets are formed but never used. */
constexpr int64_t kIndexMargin = 1024;

/* Split-K (ladder.h's k_slice): a block indexes only inside its slice, whose
 * operands and D start at pointers this_slice (below) moves on in 64 bits, so
 * what must fit is the offsets of one slice: K is the longest slice's. */
inline bool offsets_fit_int32(const fsg_gemm &g) {
    const int64_t limit = INT32_MAX;
    const int64_t k = g.k_slice > 0 && g.k_slice < g.k ? g.k_slice : g.k;
    auto fits = [&](int64_t rows, int64_t cols, int64_t ld) {  // a rows x cols matrix's offsets
        return rows + kIndexMargin < limit && cols + kIndexMargin < limit &&
               (rows + kIndexMargin) * ld + cols + kIndexMargin < limit;
    };
    const bool a = g.a_trans ? fits(k, g.m, g.lda) : fits(g.m, k, g.lda);
    const bool b = g.b_trans ? fits(g.n, k, g.ldb) : fits(k, g.n, g.ldb);
    return a && b && fits(g.m, g.n, g.ldd) && (g.c == nullptr || fits(g.m, g.n, g.ldc));
}

/* The current device's SM count: the grid of a persistent kernel, and the waves a tile count makes. */
inline cudaError_t current_sm_count(int *sms) {
    int device;
    const cudaError_t err = cudaGetDevice(&device);
    return err != cudaSuccess ? err : cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
}

/* Split-K in one launch (ladder.h's k_slice): the launcher puts the slices on
 * grid z, and each kernel starts with
 *     const fsg_gemm g = fsg::this_slice(problem);
 * the problem of its block's slice: A and B moved on to the slice's first k,
 * k cut to the slice's length, D moved on to the slice's own m x ldd. With
 * k_slice == 0 there is one slice, blockIdx.z is 0 and g is the problem. */
inline unsigned slice_count(const fsg_gemm &g) {
    return g.k_slice > 0 && g.k > g.k_slice ? (unsigned)ceil_div(g.k, g.k_slice) : 1u;
}

__device__ __forceinline__ fsg_gemm this_slice(const fsg_gemm &problem) {
    fsg_gemm g = problem;
    const int64_t z = blockIdx.z, k0 = z * problem.k_slice;  // pointer arithmetic in 64 bits, before any Index
    g.a += problem.a_trans ? k0 * problem.lda : k0;           // column-major A: k runs down the leading dimension
    g.b += problem.b_trans ? k0 : k0 * problem.ldb;           // row-major B: likewise
    g.k = problem.k_slice > 0 && problem.k - k0 > problem.k_slice ? problem.k_slice : problem.k - k0;
    g.d += z * problem.m * problem.ldd;
    return g;
}

/* A type carried as a value, so a generic lambda can receive it. */
template <typename T>
struct type_tag {
    using type = T;
};

/* The epilogue every rung shares: D(i, j) = alpha * acc + beta * C(i, j).
 * C is only read when beta != 0 (it is NULL otherwise), so NaN in an unused C
 * never leaks into D. The caller checks that (i, j) is inside D. */
__device__ __forceinline__ void store_d(const fsg_gemm &g, int64_t i, int64_t j, float acc) {
    float result = g.alpha * acc;
    if (g.c != nullptr) result += g.beta * g.c[i * g.ldc + j];
    g.d[i * g.ldd + j] = result;
}

/* Calls launch(a_trans, b_trans, index) with the two layout flags as
 * compile-time constants (std::true_type / std::false_type) and the index type
 * as a type_tag (int32_t when offsets_fit_int32, else int64_t), so every kernel
 * is compiled once per combination and its inner loops carry no layout
 * branches. Returns the launch's status: configuration errors only show in
 * cudaGetLastError(). */
template <typename Launch>
cudaError_t for_layouts(const fsg_gemm &g, Launch &&launch) {
    using Col = std::true_type;
    using Row = std::false_type;
    auto with_index = [&](auto a_trans, auto b_trans) {
        if (offsets_fit_int32(g)) launch(a_trans, b_trans, type_tag<int32_t>{});
        else launch(a_trans, b_trans, type_tag<int64_t>{});
    };
    if (g.a_trans) {
        if (g.b_trans) with_index(Col{}, Col{});
        else with_index(Col{}, Row{});
    } else {
        if (g.b_trans) with_index(Row{}, Col{});
        else with_index(Row{}, Row{});
    }
    return cudaGetLastError();
}

/* kernel<<<grid, threads, smem, stream>>>(args...), first raising the kernel's
 * dynamic shared-memory limit when smem passes the 48 KiB default (once per
 * context: support/smem_limit.h). A failure of either shows in
 * cudaGetLastError(), which for_layouts returns. */
template <typename Kernel, typename... Args>
void launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream, const Args &...args) {
    if (smem > 48 * 1024 && fsg_allow_dynamic_smem(reinterpret_cast<const void *>(kernel), smem) != cudaSuccess)
        return;
    kernel<<<grid, threads, smem, stream>>>(args...);
}

}  // namespace fsg

#endif /* FASTSGEMM_COMMON_CUH */
