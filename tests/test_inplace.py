"""Rung 18, tf32x3_inplace: no pack pass, the k-contiguous operand split in place in shared memory.

Its promise (kernels/ladder/18_tf32x3_inplace.cu): the split, the products and the order of the sums are rung
15's, so with alpha 1 and beta 0 its result is tf32x3's, bit for bit, in every orientation: B column-major (B^T in
shared memory), and both row-major (the product run as B^T A^T, written back transposed). Where it declines (no
k-contiguous operand, a matrix the copy engine cannot read) rung 16's direct path runs, whose numbers are the same.
The registry-driven suites (correctness over every layout, split-K, batches, determinism) take the rung as well.
"""
import numpy as np
import pytest

import fastsgemm
from conftest import (COPY_ENGINE_CASES, COPY_ENGINE_TAKES, TRANSPOSE_IDS, TRANSPOSES, assert_inf_and_nan_as_numpy,
                      copy_engine_case, copy_engine_stacks, launched_kernels, needs_hopper, random_matrix, reference,
                      run_raw)

pytestmark = pytest.mark.gpu

KERNEL = "tf32x3_inplace"


# Whole tiles; partial tiles on every edge; K not a multiple of the 32-deep k-tile or of 4; one row or one column;
# a long K that the planner cuts into slices (each slice read from the middle of the operands); K of 1 to 3, less
# than one 16-byte line of a k-contiguous row (the copy engine's zeros fill the rest of the k-tile).
SHAPES = [(256, 128, 256), (130, 70, 100), (67, 45, 5001), (200, 96, 9000), (1, 300, 4), (300, 1, 36),
          (129, 257, 33), (70, 90, 1), (33, 130, 2), (129, 64, 3)]


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_equals_the_packed_path_bit_for_bit(m, n, k, trans_a, trans_b, rng):
    """A wrong fragment layout of R, a k-tile from the wrong place, a stage split before its bytes landed or
    refilled before it was read, garbage where the copy engine should have brought zeros, or a transposed store
    that misses: each would show as differing bits. The comparison cannot pass by accident: tf32x3 and tf32x3_mma
    differ in their bits (tests/test_tensorcore.py)."""
    needs_hopper()
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b)
    packed = run_raw("tf32x3", A, B, trans_a, trans_b)
    assert not np.isnan(mine).any()
    mismatches = np.argwhere(mine != packed)
    assert mismatches.size == 0, f"{len(mismatches)} elements differ, first at {mismatches[:3].tolist()}"
    exact = reference(A, B)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm._registry.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_alpha_beta_and_c_in_every_orientation(trans_a, trans_b, rng):
    """The transposed store reads C where it writes D: C(i, j) beside D(i, j), not C(j, i). Leading dimensions
    the copy engine takes (multiples of 4), so that its epilogue is the one with C."""
    m, n, k = 152, 92, 72
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=1.5, beta=-0.5, C=C)
    exact = 1.5 * reference(A, B) - 0.5 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm._registry.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_split_k_with_c_in_every_orientation(trans_a, trans_b, rng):
    """A K the planner cuts into slices, with C: the slices' sum and beta C meet in the epilogue of the transposed
    store too (both operands row-major), where C must be read beside D, once."""
    m, n, k = 136, 72, 9000
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=-0.75, beta=2.0, C=C)
    exact = -0.75 * reference(A, B) + 2.0 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm._registry.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("case", COPY_ENGINE_CASES)
def test_the_path_that_runs(case):
    """The bit-for-bit test cannot tell this rung from its fallback (they give the same numbers): the profiler
    can. The copy engine takes 16-byte aligned matrices with a k-contiguous operand; anything else goes to rung
    16's direct path, and no call packs its operands."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    a, b = copy_engine_case(torch, case)
    path = "tf32x3_inplace" if case in COPY_ENGINE_TAKES else "tf32x3_regs_direct"
    names = launched_kernels(lambda: fastsgemm.matmul(a, b, kernel=KERNEL))
    ours = [name for name in names if "fsg::" in name]
    assert len(ours) == 1 and path in ours[0], f"{case}: launched {names}"
    expected = torch.matmul(a.double(), b.double())
    result = fastsgemm.matmul(a, b, kernel=KERNEL)
    assert float((result.double() - expected).norm() / expected.norm()) < fastsgemm._registry.ERROR_BOUND["fp32"]


def test_stacks_equal_the_packed_path_bit_for_bit():
    """Stacks (conftest's copy_engine_stacks; rung 16's direct path runs the odd step): each is tf32x3's
    result, bit for bit."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    cases = copy_engine_stacks(torch, seed=18)
    for what, (a, b) in cases.items():
        mine = fastsgemm.matmul(a, b, kernel=KERNEL)
        assert torch.equal(mine, fastsgemm.matmul(a, b, kernel="tf32x3")), f"{what}: differs from tf32x3"
        expected = torch.matmul(a.double(), b.double())
        assert float((mine.double() - expected).norm() / expected.norm()) < fastsgemm._registry.ERROR_BOUND["fp32"]


def test_inf_and_nan_as_numpy_gives_them():
    """Both orientations: the split of Inf gives a NaN low part, which the result must not show."""
    needs_hopper()
    assert_inf_and_nan_as_numpy(KERNEL)
