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

/* Other configurations of rungs: the same idea with other tile sizes or
 * paths, for kernel="<rung>:<name>" and the tuning behind kernel="auto".
 * `.launch_batch`: the launcher that runs a stack of products in one launch
 * (ladder.h); without one a stack runs product by product (fsg_each_product). */
static const fsg_config tile2d_configs[] = {
    {"walked", "tiles loaded through pointers moved on by a tile per step, not recomputed indices and bounds",
     fsg_tile2d_walked_sgemm, GRID_Y_LIMIT(128), .source = "kernels/engine/tile2d_walked.cu"},
};

#define ENGINE_WARPTILE .source = "kernels/engine/warptile.cu"
static const fsg_config warptile_configs[] = {
    {"128x128x16", "8 warps of 32 x 64, 8 x 8 per thread, two blocks per SM: the same work per wave, smaller tiles",
     fsg_warptile_128x128x16_sgemm, GRID_Y_LIMIT(128), ENGINE_WARPTILE},
    {"64x128x16", "8 warps of 32 x 32, 8 x 4 per thread, three blocks per SM", fsg_warptile_64x128x16_sgemm,
     GRID_Y_LIMIT(64), ENGINE_WARPTILE},
    {"64x64x16", "4 warps of 32 x 32, 8 x 4 per thread, four blocks per SM: more blocks for smaller problems",
     fsg_warptile_64x64x16_sgemm, GRID_Y_LIMIT(64), ENGINE_WARPTILE},
    {"waves", "128 x 256 or 128 x 128 blocks, whichever falls in fewer rounds over the SMs",
     fsg_warptile_waves_sgemm, GRID_Y_LIMIT(128), ENGINE_WARPTILE},
};

/* The tensor-core rungs' sums keep their accuracy at any K: a long K is sliced
 * only to fill the GPU with blocks of their tile (ladder.h's fsg_fill). */
#define FILL(TILE_M, TILE_N, PER_SM) .fill = {(TILE_M), (TILE_N), (PER_SM)}
/* ozaki's (eight moduli): its integer sums are exact and its launcher runs K in panels added in order, so K is never
 * cut by the planner (ladder.h's whole_k): a row's result is the same bits in a product of any number of rows.
 * Not ozaki:7's: with seven moduli a panel of 16384 leaves it too few bits a product (its error there, about 1e-6 on
 * normal data, is three times cuBLAS's at a small output, where the planner's slices of 512 keep it within 2x). */
#define WHOLE_K(TILE_M, TILE_N, PER_SM) .fill = {(TILE_M), (TILE_N), (PER_SM), 0, true}

/* The tensor-core lessons past mma.sync (rungs 19-24): kernel="<rung>" runs the engine's copy of the code, in
 * kernels/engine/ (with stacks in one launch, K panels and the fallbacks), and kernel="<rung>:lesson" the lesson's
 * file as it stands, which auto never runs. */
#define LESSON(NAME, NUMBER, TILE_M, TILE_N, MAX_TILE, LAUNCH)                                                         \
    {"lesson", "the lesson's own code, one product a launch; kernel=\"" NAME "\" runs the engine's copy of it, "     \
     "which may move on as the engine gets faster", LAUNCH, GRID_Y_LIMIT(MAX_TILE), FILL(TILE_M, TILE_N, 1),         \
     .source = "kernels/ladder/" NUMBER "_" NAME ".cu",                                                               \
     .not_for_auto = "a lesson: kernel=\"" NAME "\" is the engine's copy of its code, with stacks in one launch"}
/* The engine's thin configurations: a rung's own launcher, with the planner told to cut even a short K into
 * slices side by side (ladder.h's short_slice), as far as one wave of its blocks needs. */
static const fsg_config tf32x3_mma_configs[] = {
    {"thin", "rung 18's kernel with K cut into slices of 64 or more side by side, then summed in order, as far as "
     "one wave of its 64 x 64 blocks needs: for thin results (a few rows or columns, as a small batch through a "
     "layer), whose few blocks would each walk the whole K",
     fsg_tf32x3_mma_sgemm, GRID_Y_LIMIT(64), {.tile_m = 64, .tile_n = 64, .blocks_per_sm = 2, .short_slice = 64}},
};

static const fsg_config tf32x3_configs[] = {
    {"128x64", "128 x 64 block tiles: twice the blocks of 128 x 128, for medium problems "
     "(tf32x3_mma where wgmma is not had)",
     fsg_tf32x3_128x64_sgemm, GRID_Y_LIMIT(64), FILL(128, 64, 1), fsg_tf32x3_128x64_batch_sgemm,
     .source = "kernels/engine/tf32x3_128x64.cu"},
    {"direct", "no pack pass, 128 x 64 tiles: the producer splits A and B into shared memory itself, for a small "
     "result and a long K (tf32x3_mma where wgmma is not had)",
     fsg_tf32x3_direct_sgemm, GRID_Y_LIMIT(64), FILL(128, 64, 1), fsg_tf32x3_direct_batch_sgemm,
     .source = "kernels/engine/tf32x3_direct.cu"},
    LESSON("tf32x3", "20", 128, 128, 64, fsg_tf32x3_lesson_sgemm),
};

static const fsg_config tf32x3_regs_configs[] = {
    {"direct", "no pack pass, 128 x 64 tiles on a persistent grid: the producers split only B into shared memory, the "
     "consumers A in registers (tf32x3_mma where wgmma is not had)",
     fsg_tf32x3_regs_direct_sgemm, GRID_Y_LIMIT(64), FILL(128, 64, 1), fsg_tf32x3_regs_direct_batch_sgemm,
     .source = "kernels/engine/tf32x3_regs_direct.cu"},
    {"4steps", "A's fragments of all four k-steps of a tile held at once: one wgmma wait per k-tile, not two "
     "(tf32x3 where A cannot be read by tensor copies; tf32x3_mma where wgmma is not had)",
     fsg_tf32x3_regs_4steps_sgemm, GRID_Y_LIMIT(64), FILL(128, 128, 1), fsg_tf32x3_regs_4steps_batch_sgemm,
     .source = "kernels/engine/tf32x3_regs_4steps.cu"},
    LESSON("tf32x3_regs", "21", 128, 128, 64, fsg_tf32x3_regs_lesson_sgemm),
};

static const fsg_config ozaki_configs[] = {
    {"7", "seven moduli, not eight: an eighth less INT8 work, 8 bits fewer between the scaled operands, so more "
     "outputs leave the integers for double; never auto's (tf32x3 where INT8 wgmma is not had)",
     fsg_ozaki_7_sgemm, GRID_Y_LIMIT(64), FILL(128, 256, 1), .precision = "near-fp32"},
    {"lesson", "the lesson's scheme: rows scaled by their largest element, a row whose rounding weighs too much "
     "computed whole in double, so its speed depends on the data (tf32x3 where INT8 wgmma is not had)",
     fsg_ozaki_lesson_sgemm, GRID_Y_LIMIT(64), WHOLE_K(128, 256, 1), .source = "kernels/ladder/24_ozaki.cu",
     .not_for_auto = "its speed depends on the data: a row whose rounding weighs too much runs whole as dot "
                     "products in double (70-100x slower on softmax rows, spread exponents, one outlier column)"},
};

static const fsg_config tf32_configs[] = {LESSON("tf32", "19", 128, 256, 128, fsg_tf32_lesson_sgemm)};
static const fsg_config tf32x3_inplace_configs[] = {
    LESSON("tf32x3_inplace", "22", 128, 128, 64, fsg_tf32x3_inplace_lesson_sgemm)};
static const fsg_config tf32_tma_configs[] = {LESSON("tf32_tma", "23", 128, 128, 64, fsg_tf32_tma_lesson_sgemm)};
#define CONFIGS(list) .configs = (list), .config_count = (int)(sizeof(list) / sizeof((list)[0]))

const fsg_rung fsg_rungs[] = {
    {
        .number = 0,
        .name = "cpu",
        .idea = "reference in plain C: cache-blocked loops on one host thread",
        .device = FSG_DEVICE_CPU,
        .source = "kernels/support/cpu.c",
        .launch = fsg_cpu_sgemm,
        .sass = "",
        .precision = "fp32",
        .max_dim = INT64_MAX,
    },
    {
        .number = 1,
        .name = "naive",
        .idea = "one GPU thread per element of C, every operand read from global memory",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/01_naive.cu",
        .launch = fsg_naive_sgemm,
        .sass = "LDG.E FFMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 2,
        .name = "coalesced",
        .idea = "a warp's threads own consecutive columns: coalesced loads of B and stores of D",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/02_coalesced.cu",
        .launch = fsg_coalesced_sgemm,
        .sass = "LDG.E FFMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 3,
        .name = "smem",
        .idea = "32 x 32 tiles of A and B staged in shared memory, sliding along K",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/03_smem.cu",
        .launch = fsg_smem_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 4,
        .name = "grouped",
        .idea = "blocks take their tiles in groups of 16 tile rows, so the tiles they share stay in L2",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/04_grouped.cu",
        .launch = fsg_grouped_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(32),
    },
    {
        .number = 5,
        .name = "tile1d",
        .idea = "each thread computes 8 results down one column (1-D register tiling)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/05_tile1d.cu",
        .launch = fsg_tile1d_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(64),
    },
    {
        .number = 6,
        .name = "tile2d",
        .idea = "each thread computes an 8 x 8 tile as outer products of register fragments",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/06_tile2d.cu",
        .launch = fsg_tile2d_sgemm,
        .sass = "LDS STS BAR.SYNC",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
        CONFIGS(tile2d_configs),
    },
    {
        .number = 7,
        .name = "transposed",
        .idea = "A stored transposed in shared memory, so a thread's fragments of A and B come by LDS.128",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/07_transposed.cu",
        .launch = fsg_transposed_sgemm,
        .sass = "LDS.128 FFMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 8,
        .name = "widestore",
        .idea = "D written four floats a store (STG.128) where D and C allow it, element by element at edges",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/08_widestore.cu",
        .launch = fsg_widestore_sgemm,
        .sass = "STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 9,
        .name = "vectorized",
        .idea = "the tiles loaded four floats a load (LDG.128) where A and B allow it, element by element at edges",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/09_vectorized.cu",
        .launch = fsg_vectorized_sgemm,
        .sass = "LDG.E.128 STG.E.128 LDS.128 STS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 10,
        .name = "bankfree",
        .idea = "shared-memory layout without bank conflicts: split thread fragments, padded rows",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/10_bankfree.cu",
        .launch = fsg_bankfree_sgemm,
        .sass = "LDG.E.128 STG.E.128 LDS.128 STS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 11,
        .name = "twostage",
        .idea = "two shared-memory stages: tile k+1 is loaded into registers during the math on tile k, then stored",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/11_twostage.cu",
        .launch = fsg_twostage_sgemm,
        .sass = "LDG.E.128 STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 12,
        .name = "doublebuffer",
        .idea = "cp.async: an operand whose shared layout is its global layout goes straight into shared memory",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/12_doublebuffer.cu",
        .launch = fsg_doublebuffer_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 13,
        .name = "bigtile",
        .idea = "16 x 8 results a thread, a 128 x 256 x 16 block tile, one block an SM",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/13_bigtile.cu",
        .launch = fsg_bigtile_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 14,
        .name = "regbuffer",
        .idea = "fragments double-buffered in registers: one block an SM hides its own waits for shared memory",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/14_regbuffer.cu",
        .launch = fsg_regbuffer_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 15,
        .name = "reuse",
        .idea = "rung 14 with its FFMAs written in 2 x 2 blocks walked in a snake, so that "
                "their operands come from the register reuse cache and fewer wait on the register banks",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/15_reuse.cu",
        .launch = fsg_reuse_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
    },
    {
        .number = 16,
        .name = "warptile",
        .idea = "block tile, warp tile, thread tile: a warp owns a 64 x 64 region of its block",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/16_warptile.cu",
        .launch = fsg_warptile_sgemm,
        .sass = "LDGSTS.E.BYPASS.128 LDG.E.128 STG.E.128 LDS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(128),
        CONFIGS(warptile_configs),
    },
    {
        .number = 17,
        .name = "tf32_mma",
        .idea = "tensor cores (mma.sync) on operands rounded to TF32, 10-bit mantissas: 3e-4 relative error",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/17_tf32_mma.cu",
        .launch = fsg_tf32_mma_sgemm,
        .sass = "HMMA LDGSTS.E.BYPASS.128",
        .precision = "tf32",
        .max_dim = GRID_Y_LIMIT(128),
        FILL(128, 128, 1),
    },
    {
        .number = 18,
        .name = "tf32x3_mma",
        .idea = "each operand split into two TF32 parts, three tensor-core products: FP32 accuracy",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/ladder/18_tf32x3_mma.cu",
        .launch = fsg_tf32x3_mma_sgemm,
        .sass = "HMMA LDGSTS.E.BYPASS.128",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(64),
        FILL(64, 64, 2),
        CONFIGS(tf32x3_mma_configs),
    },
    {
        .number = 19,
        .name = "tf32",
        .idea = "Hopper's wgmma on operands packed into TF32 tiles first, fed by bulk copies to warp-specialized "
                "blocks (tf32_mma elsewhere)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/engine/tf32.cu",
        .launch = fsg_tf32_sgemm,
        .sass = "HGMMA",
        .precision = "tf32",
        .max_dim = GRID_Y_LIMIT(128),
        FILL(128, 256, 1),
        CONFIGS(tf32_configs),
        .launch_batch = fsg_tf32_batch_sgemm,
    },
    {
        .number = 20,
        .name = "tf32x3",
        .idea = "the three-product split on Hopper's wgmma: FP32 accuracy at tensor-core speed (tf32x3_mma elsewhere)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/engine/tf32x3.cu",
        .launch = fsg_tf32x3_sgemm,
        .sass = "HGMMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(64),
        FILL(128, 128, 1),
        CONFIGS(tf32x3_configs),
        .launch_batch = fsg_tf32x3_batch_sgemm,
    },
    {
        .number = 21,
        .name = "tf32x3_regs",
        .idea = "rung 20 with A split in the consumers' registers, read raw by tensor copies: only B is packed "
                "(tf32x3 where A cannot be read so; tf32x3_mma where wgmma is not had)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/engine/tf32x3_regs.cu",
        .launch = fsg_tf32x3_regs_sgemm,
        .sass = "HGMMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(64),
        FILL(128, 128, 1),
        CONFIGS(tf32x3_regs_configs),
        .launch_batch = fsg_tf32x3_regs_batch_sgemm,
    },
    {
        .number = 22,
        .name = "tf32x3_inplace",
        .idea = "rung 21 with no pack pass: both operands raw by tensor copies, the k-contiguous one split in place "
                "in shared memory, the other in registers, B^T A^T where that one is A (tf32x3_regs:direct where "
                "neither is k-contiguous or aligned; tf32x3_mma where wgmma is not had)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/engine/tf32x3_inplace.cu",
        .launch = fsg_tf32x3_inplace_sgemm,
        .sass = "HGMMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(64),
        FILL(128, 128, 1),
        CONFIGS(tf32x3_inplace_configs),
        .launch_batch = fsg_tf32x3_inplace_batch_sgemm,
    },
    {
        .number = 23,
        .name = "tf32_tma",
        .idea = "rung 19 with no pack pass: tensor maps of type TF32, so the copy engine rounds each operand to "
                "nearest as it lands; wgmma reads a k-contiguous operand from shared memory and the other from "
                "registers where its k is not contiguous, B^T A^T where B is row-major (tf32 where neither is "
                "k-contiguous or aligned; tf32_mma where wgmma is not had)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/engine/tf32_tma.cu",
        .launch = fsg_tf32_tma_sgemm,
        .sass = "HGMMA UTMALDG",
        .precision = "tf32",
        .max_dim = GRID_Y_LIMIT(128),
        FILL(128, 256, 1),
        CONFIGS(tf32_tma_configs),
        .launch_batch = fsg_tf32_tma_batch_sgemm,
    },
    {
        .number = 24,
        .name = "ozaki",
        .idea = "FP32 products as exact INT8 tensor-core products: each row scaled to integers, split into residues "
                "of eight moduli, one INT8 wgmma GEMM per modulus, recombined by the Chinese remainder theorem; "
                "the engine's scheme (kernels/engine/ozaki.cu) checks each output's error bound against an INT8 "
                "product of magnitudes and computes the few that fail in double (tf32x3 where INT8 wgmma is not had)",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/engine/ozaki.cu",
        .launch = fsg_ozaki_sgemm,
        .sass = "IGMMA",
        .precision = "fp32",
        .max_dim = GRID_Y_LIMIT(64),
        WHOLE_K(128, 256, 1),
        CONFIGS(ozaki_configs),
    },
    {
        .number = -1,
        .name = "cublas",
        .idea = "cuBLAS SGEMM in true FP32 (CUBLAS_COMPUTE_32F, never TF32): the yardstick",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/support/cublas.c",
        .launch = fsg_cublas_sgemm,
        .sass = "",
        .precision = "fp32",
        .max_dim = INT64_MAX,
        .launch_batch = fsg_cublas_batch_sgemm,
    },
    {
        .number = -1,
        .name = "cublas_tf32",
        .idea = "cuBLAS SGEMM on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32): the yardstick for tf32",
        .device = FSG_DEVICE_CUDA,
        .source = "kernels/support/cublas.c",
        .launch = fsg_cublas_tf32_sgemm,
        .sass = "",
        .precision = "tf32",
        .max_dim = INT64_MAX,
        .launch_batch = fsg_cublas_tf32_batch_sgemm,
    },
};

const int fsg_rung_count = (int)(sizeof fsg_rungs / sizeof fsg_rungs[0]);
