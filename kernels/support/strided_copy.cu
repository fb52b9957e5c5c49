/*
 * strided_copy.cu: not a rung. Copies a matrix between two strided views on
 * the GPU, so layouts the kernels do not take directly (negative strides,
 * both strides > 1, a C whose layout differs from D's) are turned into ones
 * they do, each in one pass and without a host round trip. Also sums the
 * K-slices of a split-K product (csrc/operands.c) in order.
 */
#include "common.cuh"

namespace {

constexpr int kThreads = 256;

// One thread per element, consecutive threads on consecutive columns so that
// the common case (row-major on at least one side) is coalesced. A grid-stride
// loop keeps any size within the grid limits.
__global__ void copy_matrix_kernel(float *dst, int64_t dst_rs, int64_t dst_cs, const float *src,
                                   int64_t src_rs, int64_t src_cs, int64_t rows, int64_t cols) {
    const int64_t total = rows * cols;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t i = e / cols, j = e % cols;
        dst[i * dst_rs + j * dst_cs] = src[i * src_rs + j * src_cs];
    }
}

}  // namespace

extern "C" cudaError_t fsg_copy_matrix_cuda(float *dst, int64_t dst_rs, int64_t dst_cs, const float *src,
                                            int64_t src_rs, int64_t src_cs, int64_t rows, int64_t cols,
                                            cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const int64_t blocks = fsg::ceil_div(rows * cols, kThreads);
    const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);  // the loop covers the rest
    copy_matrix_kernel<<<grid, kThreads, 0, stream>>>(dst, dst_rs, dst_cs, src, src_rs, src_cs, rows, cols);
    return cudaGetLastError();  // launch configuration errors show only here
}

namespace {

// D(i, j) = alpha * sum over s of W_s(i, j) + beta * C(i, j), the slices summed in order s = 0, 1, ...
// W_s is dense row-major m x n at w + s * m * n. One thread per element of D.
__global__ void sum_k_slices_kernel(float *d, int64_t ldd, const float *c, int64_t ldc, float alpha, float beta,
                                    const float *w, int slices, int64_t m, int64_t n) {
    const int64_t total = m * n, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t i = e / n, j = e % n;
        float sum = 0.0f;
        for (int s = 0; s < slices; ++s) sum += w[s * total + e];
        float result = alpha * sum;
        if (c != nullptr) result += beta * c[i * ldc + j];
        d[i * ldd + j] = result;
    }
}

}  // namespace

extern "C" cudaError_t fsg_sum_k_slices_cuda(float *d, int64_t ldd, const float *c, int64_t ldc, float alpha,
                                             float beta, const float *w, int slices, int64_t m, int64_t n,
                                             cudaStream_t stream) {
    if (m <= 0 || n <= 0) return cudaSuccess;
    const int64_t blocks = fsg::ceil_div(m * n, kThreads);
    sum_k_slices_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(d, ldd, c, ldc, alpha,
                                                                                             beta, w, slices, m, n);
    return cudaGetLastError();  // launch configuration errors show only here
}
