/*
 * The registry: the one list of rungs, in ladder order. The Python
 * fastsgemm.kernels(), the tests' parametrisation, the benchmarks' rows and
 * the plots' legends all read this table and nothing else.
 */
#include "ladder.h"

/* The grid's y dimension stops at 65535 blocks: a rung that puts one dimension
 * there in tiles of TILE handles that dimension up to 65535 * TILE. The
 * extension applies max_dim to both M and N. */
#define GRID_Y_LIMIT(TILE) ((int64_t)65535 * (TILE))

const fsg_rung fsg_rungs[] = {
    {
        .number = 0,
        .name = "cpu",
        .idea = "reference in plain C: cache-blocked loops on one host thread",
        .device = FSG_DEVICE_CPU,
        .source = "kernels/00_cpu.c",
        .launch = fsg_cpu_sgemm,
        .sass = "",
        .max_dim = INT64_MAX,
    },
    {
        .number = 1,
        .name = "naive",
        .idea = "one GPU thread per element of C, every operand read from global memory",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/01_naive.cu",
        .launch = fsg_naive_sgemm,
        .sass = "LDG.E FFMA",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 2,
        .name = "coalesced",
        .idea = "a warp's threads own consecutive columns: coalesced loads of B and stores of D",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/02_coalesced.cu",
        .launch = fsg_coalesced_sgemm,
        .sass = "LDG.E FFMA",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 3,
        .name = "smem",
        .idea = "32 x 32 tiles of A and B staged in shared memory, sliding along K",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/03_smem.cu",
        .launch = fsg_smem_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 4,
        .name = "tile1d",
        .idea = "each thread computes 8 results down one column (1-D register tiling)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/04_tile1d.cu",
        .launch = fsg_tile1d_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .max_dim = GRID_Y_LIMIT(64),
    },
    {
        .number = 5,
        .name = "tile2d",
        .idea = "each thread computes an 8 x 8 tile as outer products of register fragments",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/05_tile2d.cu",
        .launch = fsg_tile2d_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 6,
        .name = "vectorized",
        .idea = "128-bit global loads and stores; A transposed in shared memory so fragment loads are LDS.128",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/06_vectorized.cu",
        .launch = fsg_vectorized_sgemm,
        .sass = "LDG.E.128 STG.E.128 LDS.128 STS.128",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 7,
        .name = "bankfree",
        .idea = "shared-memory layout without bank conflicts: split thread fragments, padded rows",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/07_bankfree.cu",
        .launch = fsg_bankfree_sgemm,
        .sass = "LDG.E.128 STG.E.128 LDS.128 STS.128",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 8,
        .name = "doublebuffer",
        .idea = "two shared-memory stages: tile k+1 arrives (cp.async or register prefetch) during the math on tile k",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/08_doublebuffer.cu",
        .launch = fsg_doublebuffer_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 9,
        .name = "warptile",
        .idea = "block tile, warp tile, thread tile: each warp owns a 32 x 64 region, one wavefront per fragment load",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/09_warptile.cu",
        .launch = fsg_warptile_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = -1,
        .name = "cublas",
        .idea = "cuBLAS SGEMM in true FP32 (CUBLAS_COMPUTE_32F, never TF32): the yardstick",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/cublas.c",
        .launch = fsg_cublas_sgemm,
        .sass = "",
        .max_dim = INT64_MAX,
    },
};

const int fsg_rung_count = (int)(sizeof fsg_rungs / sizeof fsg_rungs[0]);
