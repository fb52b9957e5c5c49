"""Rung 23, tf32_tma: no pack pass; tensor maps of type TF32, so the copy engine rounds the operands.

Its promises (kernels/ladder/23_tf32_tma.cu):
- the copy engine rounds each operand to TF32 to nearest, ties to even, as rung 19's pack pass does;
- the products and the order of the sums are rung 19's, so its result is tf32's, bit for bit, in every
  orientation: B column-major (B^T read by wgmma from shared memory), both row-major (the product run as
  B^T A^T, written back transposed), A column-major (A's fragments read across its rows);
- where it declines (no k-contiguous operand, a matrix the copy engine cannot read) rung 19 runs.
The registry-driven suites (correctness over every layout, split-K, batches, determinism) take the rung as well.
"""
import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing
from conftest import (COPY_ENGINE_CASES, COPY_ENGINE_TAKES, TRANSPOSE_IDS, TRANSPOSES, assert_inf_and_nan_as_numpy,
                      copy_engine_case, copy_engine_stacks, launched_kernels, needs_hopper, random_matrix, reference,
                      run_raw)

pytestmark = pytest.mark.gpu

KERNEL = "tf32_tma"
TF32_BOUND = fastsgemm.testing.ERROR_BOUND["tf32"]

# Whole tiles (128 x 256, either way round); partial tiles on every edge; K not a multiple of the 32-deep k-tile
# or of 4; one row or one column; a long K that the planner cuts into slices (each slice read from the middle of
# the operands); K of 1 to 3, less than one 16-byte line of a k-contiguous row (the copy engine's zeros fill the
# rest of the k-tile, with lines padded to 4 floats; K = 1 runs rung 19: test_padded_lines_take_the_copy_engine);
# more output tiles than SMs, so that blocks take several (the persistent grid).
SHAPES = [(256, 512, 256), (130, 300, 100), (67, 45, 5001), (300, 200, 9000), (1, 300, 4), (300, 1, 36),
          (129, 257, 33), (70, 90, 1), (260, 33, 2), (129, 64, 3), (2100, 1900, 64)]


def tf32_nearest_even(x):
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    return rounded.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("pad", [True, False], ids=["lines-of-4", "tight"])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_equals_the_packed_path_bit_for_bit(m, n, k, trans_a, trans_b, pad, rng):
    """A wrong fragment layout of R, a k-tile from the wrong place, a stage refilled before it was read, a
    fragment register reused while its wgmma still reads it, garbage where the copy engine should have brought
    zeros, or a transposed store that misses: each would show as differing bits. The comparison cannot pass by
    accident: tf32 and tf32_mma differ in their bits (tests/test_tensorcore.py). With lines padded to 4 floats
    the copy engine runs every orientation but column-major A with row-major B (test_padded_lines_take_the_copy_
    engine); stored tight, a line of 1, 2, 3, 5001 ... floats is one it cannot take, and rung 19 runs."""
    needs_hopper()
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, pad=pad)
    packed = run_raw("tf32", A, B, trans_a, trans_b, pad=pad)
    assert not np.isnan(mine).any()
    mismatches = np.argwhere(mine.view(np.uint32) != packed.view(np.uint32))
    assert mismatches.size == 0, f"{len(mismatches)} elements differ, first at {mismatches[:3].tolist()}"
    exact = reference(A, B)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < TF32_BOUND


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_the_copy_engine_rounds_to_nearest_even(trans_a, trans_b, rng):
    """Row i of A is zero but at k = i % 32, column j of B zero but at k = j % 32: each result is one product of
    two TF32 values (11-bit significands) or nothing, exact in FP32 either way, at every k of the tile. So the
    result is exactly rn(a) rn(b), with rn TF32's rounding to nearest, ties to even, and it is not
    trunc(a) trunc(b), what the tensor cores make of an unrounded operand. A quarter of the operands lie exactly
    halfway between two TF32 values, about half of those with an odd last kept bit: the ties' rule shows there.
    (K = 32 and lines padded to 4 floats: the copy engine's path in three orientations; column-major A with
    row-major B runs rung 19, whose pack pass rounds the same way.)"""
    needs_hopper()
    m, n, k = 200, 300, 32
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    A[np.arange(m)[:, None] % k != np.arange(k)[None, :]] = 0
    B[np.arange(k)[:, None] != np.arange(n)[None, :] % k] = 0
    for X in (A, B):  # exact ties: the 13 dropped bits are 1000000000000
        bits = X.reshape(-1).view(np.uint32)
        bits[::4] = np.where(bits[::4] != 0, (bits[::4] & ~np.uint32(0x1FFF)) | np.uint32(0x1000), 0)
    expected = tf32_nearest_even(A).astype(np.float64) @ tf32_nearest_even(B).astype(np.float64)
    truncated = (A.view(np.uint32) & ~np.uint32(0x1FFF)).view(np.float32).astype(np.float64) @ \
        (B.view(np.uint32) & ~np.uint32(0x1FFF)).view(np.float32).astype(np.float64)
    products = expected != 0
    assert products.mean() > 0.02 and (expected != truncated)[products].mean() > 0.5  # the check can tell them apart
    result = run_raw(KERNEL, A, B, trans_a, trans_b, pad=True).astype(np.float64)
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_alpha_beta_and_c_in_every_orientation(trans_a, trans_b, rng):
    """The transposed store reads C where it writes D: C(i, j) beside D(i, j), not C(j, i). Leading dimensions
    the copy engine takes (multiples of 4), so that its epilogue is the one with C."""
    m, n, k = 152, 292, 72
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=1.5, beta=-0.5, C=C)
    exact = 1.5 * reference(A, B) - 0.5 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < TF32_BOUND


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_split_k_with_c_in_every_orientation(trans_a, trans_b, rng):
    """A K the planner cuts into slices, with C: the slices' sum and beta C meet in the epilogue of the transposed
    store too (both operands row-major), where C must be read beside D, once."""
    m, n, k = 136, 72, 9000
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=-0.75, beta=2.0, C=C)
    exact = -0.75 * reference(A, B) + 2.0 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < TF32_BOUND


@pytest.mark.parametrize("case", COPY_ENGINE_CASES)
def test_the_path_that_runs(case):
    """The bit-for-bit test cannot tell this rung from its fallback (they give the same numbers): the profiler
    can. The copy engine takes 16-byte aligned matrices with a k-contiguous operand and then nothing is packed;
    anything else goes to rung 19, which packs."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    a, b = copy_engine_case(torch, case)
    names = [name for name in launched_kernels(lambda: fastsgemm.matmul(a, b, kernel=KERNEL)) if "fsg::" in name]
    if case in COPY_ENGINE_TAKES:
        assert len(names) == 1 and "tf32_tma" in names[0], f"{case}: launched {names}"
    else:
        assert any("pack" in name for name in names) and not any("tf32_tma" in name for name in names), \
            f"{case}: launched {names}"
    expected = torch.matmul(a.double(), b.double())
    result = fastsgemm.matmul(a, b, kernel=KERNEL)
    assert float((result.double() - expected).norm() / expected.norm()) < TF32_BOUND


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES[:2] + TRANSPOSES[3:], ids=TRANSPOSE_IDS[:2] + TRANSPOSE_IDS[3:])
def test_padded_lines_take_the_copy_engine(trans_a, trans_b, rng):
    """The bit-for-bit test's padded shapes (edges, K of 2 and 3, a long K in slices) run this rung's kernel, not
    rung 19's, wherever an operand is k-contiguous: the profiler says which kernels ran. Not the shapes with a
    dimension of 1: a matrix of one row or one column is read as a vector whose leading dimension is its length
    (csrc/operands.c, fsg_classify), which the copy engine takes only where that is a multiple of 4 floats, so
    some of them run rung 19 (seen on the H200: 70x90x1 with both operands row-major, 300x1x36 with B
    column-major)."""
    pytest.importorskip("torch")
    needs_hopper()
    for m, n, k in SHAPES:
        if 1 in (m, n, k):  # a vector: fastsgemm gives it its length as leading dimension (docstring)
            continue
        A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
        names = launched_kernels(lambda: run_raw(KERNEL, A, B, trans_a, trans_b, pad=True))
        assert any("tf32_tma" in name for name in names) and not any("pack" in name for name in names), \
            f"{m}x{n}x{k}: launched {names}"


def test_stacks_equal_the_packed_path_bit_for_bit():
    """Stacks (conftest's copy_engine_stacks; rung 19 runs the odd step): each is tf32's result, bit for bit."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    cases = copy_engine_stacks(torch, seed=20)
    for what, (a, b) in cases.items():
        mine = fastsgemm.matmul(a, b, kernel=KERNEL)
        assert torch.equal(mine, fastsgemm.matmul(a, b, kernel="tf32")), f"{what}: differs from tf32"
        expected = torch.matmul(a.double(), b.double())
        assert float((mine.double() - expected).norm() / expected.norm()) < TF32_BOUND


def test_inf_and_nan_as_numpy_gives_them():
    """Both orientations: the copy engine's rounding keeps Inf as Inf and NaN as NaN."""
    needs_hopper()
    assert_inf_and_nan_as_numpy(KERNEL)
