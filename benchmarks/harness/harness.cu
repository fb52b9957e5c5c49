// benchmarks/harness: a C++ timing harness for the batched tf32x3 launchers and cuBLAS FP32 (pedantic), linked
// straight against the kernels, no Python in between: for A/B runs of a kernel change on the device.
//     benchmarks/harness/build.sh && benchmarks/harness/harness [case substring or all] [repeats] [launcher]
// CUDA events around each call, median of the repeats after 3 warm-ups; products 0 and last are checked against
// float64 on the host (16 rows each), the output poisoned with NaN first.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <random>
#include <string>
#include <cmath>
#include <cublas_v2.h>
#include "ladder.h"


#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

static cublasHandle_t handle;
static cudaError_t cublas_batch(const fsg_gemm *g, const fsg_batch *b, cudaStream_t s) {
    // row-major D = A B  ==  column-major D^T = B^T A^T
    float alpha = g->alpha, beta = 0.f;
    cublasSetStream(handle, s);
    cublasStatus_t st = cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &alpha,
        g->b, (int)g->ldb, b->step_b, g->a, (int)g->lda, b->step_a, &beta, g->d, (int)g->ldd, b->step_d, (int)b->count);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

struct Case { const char *name; int64_t batch, m, n, k; bool shared_b; bool a_trans, b_trans; };

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : nullptr;
    int reps = argc > 2 ? atoi(argv[2]) : 30;
    const char *which = argc > 3 ? argv[3] : nullptr;
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);
    std::vector<Case> cases = {
        {"256x128^3", 256, 128, 128, 128, false, false, false},
        {"64x256^3", 64, 256, 256, 256, false, false, false},
        {"8x1024^3", 8, 1024, 1024, 1024, false, false, false},
        {"32x1024^3@1024^2", 32, 1024, 1024, 1024, true, false, false},
        {"1x4096^3", 1, 4096, 4096, 4096, false, false, false},
        {"64x256^3 At", 64, 256, 256, 256, false, true, false},
        {"64x256^3 Bt", 64, 256, 256, 256, false, false, true},
        {"100x200x150x300", 100, 200, 150, 300, false, false, false},
        {"3x1000x999x77", 3, 1000, 999, 77, false, true, true},
        {"3x1000x999x77 rows", 3, 1000, 999, 77, false, false, false},
        {"1x32768x1024^2", 1, 32768, 1024, 1024, false, false, false},
        {"1x8192^3", 1, 8192, 8192, 8192, false, false, false},
    };
    struct L { const char *name; fsg_batch_launcher f; };
    std::vector<L> ls = {
        {"tf32x3", fsg_tf32x3_batch_sgemm},
        {"tf32x3:128x64", fsg_tf32x3_128x64_batch_sgemm},
        {"direct", fsg_tf32x3_direct_batch_sgemm},
        {"regs", fsg_tf32x3_regs_batch_sgemm},
        {"regs:4steps", fsg_tf32x3_regs_4steps_batch_sgemm},
        {"regs:direct", fsg_tf32x3_regs_direct_batch_sgemm},
        {"cublas-fp32", cublas_batch},
    };
    cudaStream_t stream; CK(cudaStreamCreate(&stream));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (const Case &c : cases) {
        if (only && !strstr(c.name, only) && strcmp(only, "all")) continue;
        const int64_t sa = c.m * c.k, sb = c.shared_b ? 0 : c.k * c.n, sd = c.m * c.n;
        const int64_t na = sa * c.batch, nb = c.shared_b ? c.k * c.n : sb * c.batch, nd = sd * c.batch;
        std::vector<float> ha(na), hb(nb), hd(nd);
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (auto &x : ha) x = u(rng);
        for (auto &x : hb) x = u(rng);
        float *da, *db, *dd;
        CK(cudaMalloc(&da, na * 4)); CK(cudaMalloc(&db, nb * 4)); CK(cudaMalloc(&dd, nd * 4));
        CK(cudaMemcpy(da, ha.data(), na * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, hb.data(), nb * 4, cudaMemcpyHostToDevice));
        fsg_gemm g{};
        g.m = c.m; g.n = c.n; g.k = c.k; g.alpha = 1.f; g.beta = 0.f;
        g.a = da; g.a_trans = c.a_trans; g.lda = c.a_trans ? c.m : c.k;
        g.b = db; g.b_trans = c.b_trans; g.ldb = c.b_trans ? c.k : c.n;
        g.c = nullptr; g.d = dd; g.ldd = c.n;
        fsg_batch bt{c.batch, sa, sb, 0, sd};
        // float64 reference on products 0 and batch-1
        std::vector<int64_t> check = {0, c.batch - 1};
        std::vector<double> ref(2 * sd), scale(2 * sd);
        for (int ci = 0; ci < 2; ++ci) {
            int64_t p = check[ci];
            const float *A = ha.data() + p * sa, *B = hb.data() + (c.shared_b ? 0 : p * sb);
            for (int64_t i = 0; i < c.m; i += (c.m > 16 ? c.m / 16 : 1))
                for (int64_t j = 0; j < c.n; ++j) {
                    double s = 0, t = 0;
                    for (int64_t q = 0; q < c.k; ++q) {
                        double a = c.a_trans ? A[q * c.m + i] : A[i * c.k + q];
                        double b = c.b_trans ? B[j * c.k + q] : B[q * c.n + j];
                        s += a * b; t += fabs(a * b);
                    }
                    ref[ci * sd + i * c.n + j] = s; scale[ci * sd + i * c.n + j] = t;
                }
        }
        const bool is_cublas_ok = !c.a_trans && !c.b_trans;
        std::vector<float> first;  // tf32x3's result (the first launcher), to which the regs variants must be equal bit for bit
        for (const L &l : ls) {
            if (!strcmp(l.name, "cublas-fp32") && !is_cublas_ok) continue;
            if (which && strcmp(which, l.name)) continue;
            CK(cudaMemsetAsync(dd, 0xff, nd * 4, stream));  // NaN poison
            cudaError_t err = l.f(&g, &bt, stream);
            if (err != cudaSuccess) { printf("%-18s %-14s launch error %s\n", c.name, l.name, cudaGetErrorString(err)); continue; }
            CK(cudaStreamSynchronize(stream));
            CK(cudaGetLastError());
            CK(cudaMemcpy(hd.data(), dd, nd * 4, cudaMemcpyDeviceToHost));
            double worst = 0;
            for (int ci = 0; ci < 2; ++ci) {
                int64_t p = check[ci];
                for (int64_t e = 0; e < sd; ++e) {
                    if ((e / c.n) % (c.m > 16 ? c.m / 16 : 1)) continue;
                    double got = hd[p * sd + e], want = ref[ci * sd + e];
                    double r = fabs(got - want) / (scale[ci * sd + e] + 1e-30);
                    if (!(r <= 1e300)) r = 1e300;
                    worst = std::max(worst, r);
                }
            }
            int bad = 0;
            for (int64_t e = 0; e < nd; ++e) if (!std::isfinite(hd[e])) { bad++; }
            int64_t differ = -1;  // elements that differ from tf32x3's, bit for bit (-1: not compared)
            if (!strcmp(l.name, "tf32x3")) first = hd;
            else if (!strncmp(l.name, "regs", 4) && first.size() == hd.size()) {
                differ = 0;
                for (int64_t e = 0; e < nd; ++e) differ += memcmp(&hd[e], &first[e], sizeof(float)) != 0;
            }
            for (int w = 0; w < 3; ++w) CK(l.f(&g, &bt, stream));
            std::vector<float> ts;
            for (int r = 0; r < reps; ++r) {
                CK(cudaEventRecord(e0, stream));
                CK(l.f(&g, &bt, stream));
                CK(cudaEventRecord(e1, stream));
                CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms);
            }
            std::sort(ts.begin(), ts.end());
            double med = ts[ts.size() / 2];
            double tf = 2.0 * c.batch * c.m * c.n * c.k / (med * 1e-3) / 1e12;
            fflush(stdout); printf("%-18s %-14s %9.1f us %7.1f TFLOP/s  err(|ab|-rel) %.2e  nonfinite %d  differ-from-tf32x3 %lld\n", c.name, l.name, med * 1e3, tf, worst, bad, (long long)differ);
        }
        cudaFree(da); cudaFree(db); cudaFree(dd);
    }
    return 0;
}
