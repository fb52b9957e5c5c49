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
from conftest import random_matrix, reference

pytestmark = pytest.mark.gpu

KERNEL = "tf32x3_inplace"


def needs_hopper():
    if tuple(fastsgemm.device_info()["compute_capability"]) != (9, 0):
        pytest.skip("only compute capability 9.0 has the wgmma paths")


# Whole tiles; partial tiles on every edge; K not a multiple of the 32-deep k-tile or of 4; one row or one column;
# a long K that the planner cuts into slices (each slice read from the middle of the operands); K of 1 to 3, less
# than one 16-byte line of a k-contiguous row (the copy engine's zeros fill the rest of the k-tile).
SHAPES = [(256, 128, 256), (130, 70, 100), (67, 45, 5001), (200, 96, 9000), (1, 300, 4), (300, 1, 36),
          (129, 257, 33), (70, 90, 1), (33, 130, 2), (129, 64, 3)]
TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]


def run_raw(kernel, A, B, trans_a, trans_b, alpha=1.0, beta=0.0, C=None):
    """sgemm_raw with A and B stored row- or column-major on the device, into an output poisoned with NaN (or C)."""
    m, k = A.shape
    n = B.shape[1]
    a = fastsgemm.to_device(np.ascontiguousarray(A.T) if trans_a else A)
    b = fastsgemm.to_device(np.ascontiguousarray(B.T) if trans_b else B)
    out = fastsgemm.to_device(np.full((m, n), np.nan, np.float32) if C is None else C)
    fastsgemm.sgemm_raw(m, n, k, alpha, a.ptr, m if trans_a else k, b.ptr, k if trans_b else n, beta, out.ptr, n,
                        kernel=kernel, trans_a=trans_a, trans_b=trans_b)
    return out.numpy()


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES,
                         ids=[f"{'col' if a else 'row'}_{'col' if b else 'row'}" for a, b in TRANSPOSES])
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


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES,
                         ids=[f"{'col' if a else 'row'}_{'col' if b else 'row'}" for a, b in TRANSPOSES])
def test_alpha_beta_and_c_in_every_orientation(trans_a, trans_b, rng):
    """The transposed store reads C where it writes D: C(i, j) beside D(i, j), not C(j, i)."""
    m, n, k = 150, 90, 70
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=1.5, beta=-0.5, C=C)
    exact = 1.5 * reference(A, B) - 0.5 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm._registry.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES,
                         ids=[f"{'col' if a else 'row'}_{'col' if b else 'row'}" for a, b in TRANSPOSES])
def test_split_k_with_c_in_every_orientation(trans_a, trans_b, rng):
    """A K the planner cuts into slices, with C: the slices' sum and beta C meet in the epilogue of the transposed
    store too (both operands row-major), where C must be read beside D, once."""
    m, n, k = 136, 72, 9000
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=-0.75, beta=2.0, C=C)
    exact = -0.75 * reference(A, B) + 2.0 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm._registry.ERROR_BOUND["fp32"]


def launched_kernels(call):
    """The names of the GPU kernels `call` launched, as the CUDA profiler saw them (torch's)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    call()  # once outside the profile: first-call set-up (tensor-map encoder, attributes) is not what is asked
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type.name == "CUDA"]


@pytest.mark.parametrize("case,path", [
    ("row-major A and B", "tf32x3_inplace"),
    ("column-major B", "tf32x3_inplace"),
    ("column-major A and B", "tf32x3_inplace"),
    ("column-major A, row-major B", "tf32x3_regs_direct"),
    ("an A 4 bytes off 16-byte alignment", "tf32x3_regs_direct"),
    ("an lda that is no multiple of 4", "tf32x3_regs_direct"),
])
def test_the_path_that_runs(case, path):
    """The bit-for-bit test cannot tell this rung from its fallback (they give the same numbers): the profiler
    can. The copy engine takes 16-byte aligned matrices with a k-contiguous operand; anything else goes to rung
    16's direct path, and no call packs its operands."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    m, n, k = 256, 192, 160
    base_a = torch.randn(m * (k + 8) + 8, device="cuda")
    a = base_a[: m * k].view(m, k)
    b = torch.randn(k, n, device="cuda")
    if case == "column-major B":
        b = torch.randn(n, k, device="cuda").t()
    elif case == "column-major A and B":
        a, b = torch.randn(k, m, device="cuda").t(), torch.randn(n, k, device="cuda").t()
    elif case == "column-major A, row-major B":
        a = torch.randn(k, m, device="cuda").t()
    elif case == "an A 4 bytes off 16-byte alignment":
        a = base_a[1 : 1 + m * k].view(m, k)
    elif case == "an lda that is no multiple of 4":
        a = base_a[: m * (k + 1)].view(m, k + 1)[:, :k]
    names = launched_kernels(lambda: fastsgemm.matmul(a, b, kernel=KERNEL))
    ours = [name for name in names if "fsg::" in name]
    assert len(ours) == 1 and path in ours[0], f"{case}: launched {names}"
    expected = torch.matmul(a.double(), b.double())
    result = fastsgemm.matmul(a, b, kernel=KERNEL)
    assert float((result.double() - expected).norm() / expected.norm()) < fastsgemm._registry.ERROR_BOUND["fp32"]


def test_stacks_equal_the_packed_path_bit_for_bit():
    """Stacks through the tensor maps' third dimension: each product's own A and B, a shared A (B's stack every
    other matrix, so the products do not fold into one), a shared B (one launch of the stack, not a tall matrix:
    the output's stack is strided), both column-major, and a stack step that is no multiple of 4 floats (the
    direct path runs it), and stacks whose operands' matrices overlap one another. Each is tf32x3's result, bit for
    bit."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    generator = torch.Generator(device="cuda").manual_seed(18)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=generator)

    cases = {
        "own A and B": (randn(6, 130, 100), randn(6, 100, 70)),
        "128^3 stack": (randn(40, 128, 128), randn(40, 128, 128)),
        "shared A": (randn(130, 100), randn(12, 100, 70)[::2]),
        "shared B": (randn(5, 2, 64, 96)[:, 0], randn(96, 80)),
        "column-major": (randn(4, 100, 130).transpose(1, 2), randn(4, 70, 100).transpose(1, 2)),
        "odd step": (randn(5 * 2950).as_strided((5, 67, 43), (2950, 44, 1)), randn(5, 43, 45)),
        # Each product's A starts 16 rows into the one before it: the copies of one read what another's read.
        "overlapping A's": (randn(7 * 16 * 48 + 64 * 48).as_strided((7, 64, 48), (16 * 48, 48, 1)), randn(7, 48, 72)),
        "overlapping B's (column-major)": (randn(6, 96, 40), randn(6 * 8 * 40 + 88 * 40).as_strided(
            (6, 40, 88), (8 * 40, 1, 40))),
    }
    for what, (a, b) in cases.items():
        mine = fastsgemm.matmul(a, b, kernel=KERNEL)
        assert torch.equal(mine, fastsgemm.matmul(a, b, kernel="tf32x3")), f"{what}: differs from tf32x3"
        expected = torch.matmul(a.double(), b.double())
        assert float((mine.double() - expected).norm() / expected.norm()) < fastsgemm._registry.ERROR_BOUND["fp32"]


def test_inf_and_nan_as_numpy_gives_them():
    """Both orientations: the split of Inf gives a NaN low part, which the result must not show."""
    needs_hopper()
    A = np.ones((40, 48), np.float32)
    B = np.full((48, 36), 0.5, np.float32)
    A[2, 3], A[5, 0], A[7, 1] = np.inf, -np.inf, np.nan
    B[10, 9] = np.inf
    with np.errstate(invalid="ignore"):
        expected = A.astype(np.float64) @ B.astype(np.float64)
    for trans_b in (False, True):
        result = run_raw(KERNEL, A, B, False, trans_b).astype(np.float64)
        np.testing.assert_array_equal(np.isposinf(result), np.isposinf(expected))
        np.testing.assert_array_equal(np.isneginf(result), np.isneginf(expected))
        np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(result[finite], expected[finite])
