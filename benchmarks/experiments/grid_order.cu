// Experiment: does the order in which blocks walk the output explain why rungs 3-7 trail the
// published ladder at 4096^3 (benchmarks/NOTES.md)? Our rungs put column tiles on blockIdx.x, so
// the blocks resident at one time share a row panel or two of A and stream all of B through L2;
// the published kernels put row tiles on blockIdx.x. grid_order.sh builds this harness once per
// order, each rung compiled after a `#define blockIdx ...` that remaps the block inside the kernels
// only (the launchers' grids are unchanged): as they are; swapped (x and y exchanged: valid for
// square tile counts only, so square shapes only); grouped by G block rows (grouped_order.cuh:
// a bijection for any grid). Every output is checked against cuBLAS. results/raw/grid-order-h100.txt
// was measured on the tree of commit 8a0969e. Since then rungs 3-7 take the grouped order
// themselves (blockIdx is read only inside fsg::grouped_block_tile, before the remapping macro), so
// every variant now builds them in the shipped order; rungs 8 and 9 still take each variant's.
// Timing: median of 10 CUDA-event timings after 3 warm-ups, random inputs, cuBLAS FP32 (pedantic
// math) in the same run.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cublas_v2.h>

#include "harness.cuh"  // median_ms, RowMajorProblem, and the rungs' launchers (ladder.h)


// Relative Frobenius distance between two device buffers of `count` floats.
static double relative_distance(const float *x, const float *y, size_t count) {
    std::vector<float> a(count), b(count);
    cudaMemcpy(a.data(), x, sizeof(float) * count, cudaMemcpyDeviceToHost);
    cudaMemcpy(b.data(), y, sizeof(float) * count, cudaMemcpyDeviceToHost);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < count; ++i) {
        diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
}

int main(int argc, char **argv) {
    const char *variant = argc > 1 ? argv[1] : "?";
    const struct {
        const char *name;
        cudaError_t (*launch)(const fsg_gemm *, cudaStream_t);
    } rungs[] = {{"smem", fsg_smem_sgemm},
                 {"tile1d", fsg_tile1d_sgemm},
                 {"tile2d", fsg_tile2d_sgemm},
                 {"vectorized", fsg_vectorized_sgemm},
                 {"bankfree", fsg_bankfree_sgemm},
                 {"doublebuffer", fsg_doublebuffer_sgemm},
                 {"warptile", fsg_warptile_sgemm}};
    cublasHandle_t handle;
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);  // true FP32, no TF32
    for (int64_t size : {2048, 4096, 8192}) {
        RowMajorProblem problem(size, size, size);
        fsg_gemm g = problem.g;
        const float one = 1.0f, zero = 0.0f;
        auto cublas = [&] {  // row-major D = A B is column-major D^T = B^T A^T
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.n, (int)g.m, (int)g.k, &one, g.b, (int)g.ldb, g.a,
                        (int)g.lda, &zero, problem.reference, (int)g.ldd);
        };
        const float cublas_ms = median_ms(cublas, 10);
        const double flop = 2.0 * g.m * g.n * g.k;
        printf("%-10s %-12s %5lld^3 %8.3f ms %6.2f TFLOP/s\n", variant, "cublas", (long long)size, cublas_ms,
               flop / cublas_ms / 1e9);
        g.d = problem.scratch;
        for (auto &rung : rungs) {
            cudaMemset(problem.scratch, 0xff, sizeof(float) * g.m * g.n);  // NaN: unwritten elements show
            const float ms = median_ms([&] { rung.launch(&g, 0); }, 10);
            const cudaError_t err = cudaGetLastError();
            const double distance = relative_distance(problem.scratch, problem.reference, g.m * g.n);
            printf("%-10s %-12s %5lld^3 %8.3f ms %6.2f TFLOP/s %5.1f%% of cuBLAS  vs cuBLAS %.1e %s  %s\n", variant,
                   rung.name, (long long)size, ms, flop / ms / 1e9, 100.0 * cublas_ms / ms, distance,
                   distance < 1e-5 ? "ok" : "WRONG", cudaGetErrorString(err));
        }
    }
    cublasDestroy(handle);
}
