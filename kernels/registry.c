/*
 * The registry: the one list of rungs, in ladder order. The Python
 * fastsgemm.kernels(), the tests' parametrisation, the benchmarks' rows and
 * the plots' legends all read this table and nothing else.
 */
#include "ladder.h"

/* The naive grid puts columns on gridDim.y, which stops at 65535 blocks of 32. */
#define NAIVE_MAX_DIM ((int64_t)65535 * 32)

const fsg_rung fsg_rungs[] = {
    {
        .number = 0,
        .name = "cpu",
        .idea = "reference in plain C: cache-blocked loops on one host thread",
        .device = FSG_DEVICE_CPU,
        .source = "kernels/00_cpu.c",
        .launch = fsg_cpu_sgemm,
        .max_dim = INT64_MAX,
    },
    {
        .number = 1,
        .name = "naive",
        .idea = "one GPU thread per element of C, every operand read from global memory",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/01_naive.cu",
        .launch = fsg_naive_sgemm,
        .max_dim = NAIVE_MAX_DIM,
    },
    {
        .number = -1,
        .name = "cublas",
        .idea = "cuBLAS SGEMM in true FP32 (CUBLAS_COMPUTE_32F, never TF32): the yardstick",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/cublas.c",
        .launch = fsg_cublas_sgemm,
        .max_dim = INT64_MAX,
    },
};

const int fsg_rung_count = (int)(sizeof fsg_rungs / sizeof fsg_rungs[0]);
