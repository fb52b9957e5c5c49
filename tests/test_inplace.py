"""Rung 22, tf32x3_inplace: no pack pass, the k-contiguous operand split in place in shared memory.

Its promise (kernels/ladder/22_tf32x3_inplace.cu): the split, the products and the order of the sums are rung
20's, so with alpha 1 and beta 0 its result is tf32x3's, bit for bit, in every orientation: B column-major (B^T in
shared memory), and both row-major (the product run as B^T A^T, written back transposed). Where it declines (no
k-contiguous operand, a matrix the copy engine cannot read) rung 21's direct path runs, whose numbers are the same.
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
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_alpha_beta_and_c_in_every_orientation(trans_a, trans_b, rng):
    """The transposed store reads C where it writes D: C(i, j) beside D(i, j), not C(j, i). Leading dimensions
    the copy engine takes (multiples of 4), so that its epilogue is the one with C."""
    m, n, k = 152, 92, 72
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=1.5, beta=-0.5, C=C)
    exact = 1.5 * reference(A, B) - 0.5 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_split_k_with_c_in_every_orientation(trans_a, trans_b, rng):
    """A K the planner cuts into slices, with C: the slices' sum and beta C meet in the epilogue of the transposed
    store too (both operands row-major), where C must be read beside D, once."""
    m, n, k = 136, 72, 9000
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    mine = run_raw(KERNEL, A, B, trans_a, trans_b, alpha=-0.75, beta=2.0, C=C)
    exact = -0.75 * reference(A, B) + 2.0 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("case", COPY_ENGINE_CASES)
def test_the_path_that_runs(case):
    """The bit-for-bit test cannot tell this rung from its fallback (they give the same numbers): the profiler
    can. The copy engine takes 16-byte aligned matrices with a k-contiguous operand; anything else goes to rung
    21's direct path, and no call packs its operands."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    a, b = copy_engine_case(torch, case)
    path = "tf32x3_inplace" if case in COPY_ENGINE_TAKES else "tf32x3_regs_direct"
    names = launched_kernels(lambda: fastsgemm.matmul(a, b, kernel=KERNEL))
    ours = [name for name in names if "fsg::" in name]
    assert len(ours) == 1 and path in ours[0], f"{case}: launched {names}"
    expected = torch.matmul(a.double(), b.double())
    result = fastsgemm.matmul(a, b, kernel=KERNEL)
    assert float((result.double() - expected).norm() / expected.norm()) < fastsgemm.testing.ERROR_BOUND["fp32"]


def test_stacks_equal_the_packed_path_bit_for_bit():
    """Stacks (conftest's copy_engine_stacks; rung 21's direct path runs the odd step): each is tf32x3's
    result, bit for bit."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    cases = copy_engine_stacks(torch, seed=18)
    for what, (a, b) in cases.items():
        mine = fastsgemm.matmul(a, b, kernel=KERNEL)
        assert torch.equal(mine, fastsgemm.matmul(a, b, kernel="tf32x3")), f"{what}: differs from tf32x3"
        expected = torch.matmul(a.double(), b.double())
        assert float((mine.double() - expected).norm() / expected.norm()) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("count", [64, 256], ids=["64 products (idle SMs)", "256 products"])
@pytest.mark.parametrize("b_column_major", [False, True], ids=["row-major", "B column-major"])
def test_back_to_back_calls_wait_for_each_other(b_column_major, count):
    """The rung's launches overlap (a programmatic dependent launch: the next kernel's blocks set up while the
    previous kernel runs, and wait for it before touching memory). A chain of 24 stacks queued behind a sleeping
    kernel (so that no call has finished when the next is queued), each reading the result the call before wrote
    (read after write) into a buffer the call before read (write after read), must give, bit for bit, the chain run
    one call at a time with a synchronize after each (where nothing overlaps), and float64's answer. 64 products
    leave 68 SMs of an H100 idle, where the next kernel's blocks start at once; with 256 every SM is busy. The
    results start as NaN: a read before the write shows."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    generator = torch.Generator(device="cuda").manual_seed(1818)
    n, links = 128, 24
    start = torch.rand(count, n, n, device="cuda", generator=generator) - 0.5
    weights = []  # about norm-preserving, so that 24 products neither vanish nor overflow
    for _ in range(links):
        w = torch.randn(count, n, n, device="cuda", generator=generator) / n ** 0.5
        weights.append(w.transpose(1, 2).contiguous().transpose(1, 2) if b_column_major else w)

    def chain(synchronize_each):
        buffers = [start.clone(), torch.full_like(start, float("nan"))]
        torch.cuda.synchronize()
        if not synchronize_each:
            torch.cuda._sleep(20_000_000)  # about 10 ms of GPU time: the whole chain is queued behind it
        for i, w in enumerate(weights):
            fastsgemm.matmul(buffers[i % 2], w, out=buffers[(i + 1) % 2], kernel=KERNEL)
            if synchronize_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        return buffers[links % 2]

    overlapped, one_at_a_time = chain(False), chain(True)
    assert not torch.isnan(overlapped).any()
    assert torch.equal(overlapped, one_at_a_time), "a call read or wrote memory before the call before it finished"
    expected = start.double()
    for w in weights:
        expected = torch.matmul(expected, w.double())
    error = float((overlapped.double() - expected).norm() / expected.norm())
    assert error < links * fastsgemm.testing.ERROR_BOUND["fp32"], error


def test_a_captured_chain_replays_in_order():
    """Three dependent stacks captured in one CUDA graph (the second reads the first's result, the third writes
    over the first's input). Under capture the rung launches plainly (an overlapped launch needs CUDA 12.3 to be
    recorded); each replay on fresh inputs gives float64's answer."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    generator = torch.Generator(device="cuda").manual_seed(1819)
    count, n = 64, 128
    x, w1, w2 = (torch.empty(count, n, n, device="cuda") for _ in range(3))
    middle, out = torch.empty_like(x), torch.empty_like(x)

    def steps():
        fastsgemm.matmul(x, w1, out=middle, kernel=KERNEL)
        fastsgemm.matmul(middle, w2, out=out, kernel=KERNEL)
        fastsgemm.matmul(out, w1, out=x, kernel=KERNEL)  # over x, which the first product read

    for t in (x, w1, w2):
        t.copy_(torch.randn(count, n, n, device="cuda", generator=generator) / n ** 0.5)
    steps()  # warm: everything the calls set up exists before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        steps()
    for _ in range(2):
        for t in (x, w1, w2):
            t.copy_(torch.randn(count, n, n, device="cuda", generator=generator) / n ** 0.5)
        start = x.double()
        middle.fill_(float("nan"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = torch.matmul(torch.matmul(torch.matmul(start, w1.double()), w2.double()), w1.double())
        error = float((x.double() - expected).norm() / expected.norm())
        assert error < 3 * fastsgemm.testing.ERROR_BOUND["fp32"], error



@pytest.mark.parametrize("where", ["4 bytes past 8-byte alignment", "odd leading dimension"])
@pytest.mark.parametrize("kernel,same_as", [("tf32x3_inplace", "tf32x3"), ("tf32_tma", "tf32")])
def test_the_untransposed_epilogue_where_pairs_do_not_align(kernel, same_as, where):
    """Untransposed (B column-major), the epilogue stores a thread's two adjacent results as one 8-byte store where
    the result's rows allow (rung 22's store_output, which rung 23 shares). Into an out 4 bytes past 8-byte
    alignment, or one with an odd leading dimension, it stores them one at a time: the result is the same, bit for
    bit, and nothing outside out is written. Whole tiles, so that the fast epilogue is the one that runs."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    generator = torch.Generator(device="cuda").manual_seed(2030)
    count, m, n, k = 4, 256, 256, 96
    a = torch.rand(count, m, k, device="cuda", generator=generator) - 0.5
    b = (torch.rand(count, n, k, device="cuda", generator=generator) - 0.5).mT  # k contiguous: untransposed
    expected = fastsgemm.matmul(a, b, kernel=same_as)
    if where == "4 bytes past 8-byte alignment":
        storage = torch.full((count * m * n + 1,), float("nan"), device="cuda")
        out, outside = storage[1:].view(count, m, n), storage[:1]
    else:
        storage = torch.full((count, m, n + 1), float("nan"), device="cuda")
        out, outside = storage[..., :n], storage[..., n:]
    fastsgemm.matmul(a, b, out=out, kernel=kernel)
    assert torch.equal(out, expected), f"{kernel} into an out {where} differs from {same_as}"
    assert torch.isnan(outside).all(), "written outside out"

def test_inf_and_nan_as_numpy_gives_them():
    """Both orientations: the split of Inf gives a NaN low part, which the result must not show."""
    needs_hopper()
    assert_inf_and_nan_as_numpy(KERNEL)
