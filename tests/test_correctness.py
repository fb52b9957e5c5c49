"""Every rung against float64 numpy.matmul on host arrays: shapes, layouts,
alpha/beta/C/out, empty dimensions, special values, aliasing.

Outputs are poisoned with NaN before each call, and views sit inside NaN
padding, so an element written outside its place or never written fails.
"""
import functools

import numpy as np
import pytest

import fastsgemm
from conftest import LAYOUTS, assert_close, in_layout, random_matrix, reference, rung_params, tolerance

SHAPES = [
    (1, 1, 1),
    (1, 7, 1),
    (2, 3, 4),
    (17, 33, 65),
    (31, 1, 97),  # a column
    (1, 129, 63),  # a row
    (64, 64, 1),  # K = 1
    (127, 131, 137),  # primes
    (1000, 3, 5),  # tall and skinny
    (3, 1000, 5),  # short and wide
    (5, 7, 2000),  # long K
    (256, 256, 256),
]


@pytest.mark.parametrize("kernel", rung_params())
@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_shapes(kernel, m, n, k, rng):
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    out = np.full((m, n), np.nan, np.float32)
    result = fastsgemm.sgemm(A, B, out=out, kernel=kernel)
    assert result is out
    assert_close(out, reference(A, B), tol=tolerance(kernel), what=f"{kernel} {m}x{n}x{k}")
    fresh = fastsgemm.sgemm(A, B, kernel=kernel)  # and with a result it allocates
    assert isinstance(fresh, np.ndarray) and fresh.dtype == np.float32 and fresh.shape == (m, n)
    assert_close(fresh, reference(A, B), tol=tolerance(kernel), what=f"{kernel} {m}x{n}x{k} (allocated)")


@pytest.fixture(scope="module")
def big_problem():
    """k -> 4095 x 4097 x k, no dimension a multiple of any tile: made, with its float64 reference, once for all
    rungs (and let go with the module)."""
    @functools.cache
    def make(k):
        rng = np.random.default_rng(4095)
        A, B = random_matrix(rng, 4095, 4093), random_matrix(rng, 4093, 4097)
        C = random_matrix(rng, 4095, 4097)
        A, B = np.ascontiguousarray(A[:, :k]), np.ascontiguousarray(B[:k])
        return A, B, C, reference(A, B, C, alpha=0.5, beta=-1.5)
    return make


@pytest.mark.parametrize("kernel", rung_params())
def test_odd_large(kernel, big_problem):
    # K = 4093 for every GPU rung. The host rung at 4095x4097x4093 took 12 s of the suite. It keeps M and N, on
    # which its 64 x 256 blocks and its Ctrl-C panels (whole multiples of 256 columns, csrc/interruptible.c)
    # depend, and takes K = 261: one whole 256-deep k-block (kernels/support/cpu.c) and a ragged one.
    A, B, C, ref = big_problem(261 if kernel == "cpu" else 4093)
    out = np.full(C.shape, np.nan, np.float32)
    fastsgemm.sgemm(A, B, C, alpha=0.5, beta=-1.5, out=out, kernel=kernel)
    assert_close(out, ref, tol=tolerance(kernel), what=f"{kernel} {A.shape[0]}x{B.shape[1]}x{A.shape[1]}")


@pytest.mark.parametrize("kernel", rung_params())
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
def test_input_layouts(kernel, layout_a, layout_b, rng):
    m, n, k = 23, 19, 29
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    base_a, view_a = in_layout(A, layout_a)
    base_b, view_b = in_layout(B, layout_b)
    saved_a, saved_b = base_a.copy(), base_b.copy()
    out = np.full((m, n), np.nan, np.float32)
    fastsgemm.sgemm(view_a, view_b, out=out, kernel=kernel)
    assert_close(out, reference(A, B), tol=tolerance(kernel), what=f"{kernel} A {layout_a}, B {layout_b}")
    np.testing.assert_array_equal(base_a, saved_a)  # inputs untouched, padding included
    np.testing.assert_array_equal(base_b, saved_b)


@pytest.mark.parametrize("kernel", rung_params())
@pytest.mark.parametrize("layout_out", LAYOUTS)
@pytest.mark.parametrize("layout_c", LAYOUTS)
def test_output_and_c_layouts(kernel, layout_out, layout_c, rng):
    m, n, k = 21, 26, 17
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    base_c, view_c = in_layout(C, layout_c)
    saved_c = base_c.copy()
    base_out, view_out = in_layout(np.full((m, n), np.nan, np.float32), layout_out)
    outside = np.isnan(base_out)  # every element, view included, starts as NaN
    result = fastsgemm.sgemm(A, B, view_c, alpha=-0.75, beta=1.25, out=view_out, kernel=kernel)
    assert result is view_out
    assert_close(view_out, reference(A, B, C, -0.75, 1.25), tol=tolerance(kernel), what=f"{kernel} out {layout_out}, C {layout_c}")
    np.testing.assert_array_equal(base_c, saved_c)  # C is never modified unless it is out
    written = ~np.isnan(base_out)
    assert written.sum() == m * n and np.all(outside | ~written), "wrote outside the out view"


@pytest.mark.parametrize("kernel", rung_params())
@pytest.mark.parametrize("layout", ["row", "col", "strided"])
def test_in_place_c(kernel, layout, rng):
    m, n, k = 33, 18, 40
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    _, view_c = in_layout(C, layout)
    result = fastsgemm.sgemm(A, B, view_c, alpha=2.0, beta=0.5, out=view_c, kernel=kernel)
    assert result is view_c
    assert_close(view_c, reference(A, B, C, 2.0, 0.5), tol=tolerance(kernel), what=f"{kernel} out=C ({layout})")


@pytest.mark.parametrize("kernel", rung_params())
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 3.0), (-2.0, -1.0), (1.0, 1.0), (0.0, 2.0), (3.0, 0.0)])
def test_alpha_beta(kernel, alpha, beta, rng):
    m, n, k = 40, 50, 60
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    out = np.full((m, n), np.nan, np.float32)
    fastsgemm.sgemm(A, B, C, alpha=alpha, beta=beta, out=out, kernel=kernel)
    assert_close(out, reference(A, B, C, alpha, beta), tol=tolerance(kernel), what=f"{kernel} alpha={alpha} beta={beta}")


@pytest.mark.parametrize("kernel", rung_params())
def test_beta_zero_does_not_read_c(kernel, rng):
    """BLAS convention: with beta == 0, C is not read, so NaN in C does not reach the result."""
    A, B = random_matrix(rng, 9, 11), random_matrix(rng, 11, 13)
    C = np.full((9, 13), np.nan, np.float32)
    assert_close(fastsgemm.sgemm(A, B, C, beta=0.0, kernel=kernel), reference(A, B), tol=tolerance(kernel), what=kernel)


@pytest.mark.parametrize("kernel", rung_params())
@pytest.mark.parametrize("m,n,k", [(0, 5, 3), (5, 0, 3), (0, 0, 0), (4, 6, 0), (0, 6, 0)])
def test_empty_dimensions(kernel, m, n, k, rng):
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    plain = fastsgemm.sgemm(A, B, kernel=kernel)
    np.testing.assert_array_equal(plain, np.matmul(A, B))  # zeros (K = 0) or empty
    out = np.full((m, n), np.nan, np.float32)
    fastsgemm.sgemm(A, B, C, alpha=2.0, beta=-0.5, out=out, kernel=kernel)
    np.testing.assert_allclose(out, reference(A, B, C, 2.0, -0.5), rtol=1e-6)


@pytest.mark.parametrize("kernel", rung_params())
def test_nan_and_inf_propagate(kernel, rng):
    m, n, k = 12, 10, 14
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    A[3, 5] = np.nan
    B[7, 2] = np.inf
    B[8, 6] = -np.inf
    A[9, 8] = 0.0  # 0 * -inf: NaN in D[9, 6]
    result = fastsgemm.sgemm(A, B, kernel=kernel).astype(np.float64)
    with np.errstate(invalid="ignore"):
        expected = np.matmul(A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(result), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(result), np.isneginf(expected))
    finite = np.isfinite(expected)
    loose = 10 * tolerance(kernel)  # element by element, so looser than the Frobenius norm's tolerance
    np.testing.assert_allclose(result[finite], expected[finite], rtol=loose, atol=loose)


@pytest.mark.parametrize("kernel", rung_params())
def test_out_aliasing_inputs(kernel, rng):
    """out sharing memory with A or B still gives A @ B of the inputs as they were."""
    n = 37
    A, B = random_matrix(rng, n, n), random_matrix(rng, n, n)
    ref = reference(A, B)
    a = A.copy()
    fastsgemm.sgemm(a, B, out=a, kernel=kernel)
    assert_close(a, ref, tol=tolerance(kernel), what=f"{kernel} out=A")
    b = B.copy()
    fastsgemm.sgemm(A, b, out=b.T.T, kernel=kernel)
    assert_close(b, ref, tol=tolerance(kernel), what=f"{kernel} out=B")
    a = A.copy()
    fastsgemm.sgemm(a, a.T.copy(), out=a.T, kernel=kernel)  # out is A's transpose view
    assert_close(a.T, reference(A, A.T), tol=tolerance(kernel), what=f"{kernel} out=A.T")


@pytest.mark.parametrize("kernel", rung_params())
def test_buffer_protocol_host_input(kernel, rng):
    A, B = random_matrix(rng, 6, 4), random_matrix(rng, 4, 5)
    result = fastsgemm.sgemm(memoryview(A), memoryview(B), kernel=kernel)
    assert isinstance(result, np.ndarray)
    assert_close(result, reference(A, B), tol=tolerance(kernel), what=f"{kernel} memoryview")


@pytest.mark.parametrize("kernel", rung_params())
def test_unaligned_host_input(kernel, rng):
    A, B = random_matrix(rng, 5, 7), random_matrix(rng, 7, 3)
    raw = np.zeros(A.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(A.shape)  # data at an odd address
    unaligned[...] = A
    assert not unaligned.flags.aligned
    assert_close(fastsgemm.sgemm(unaligned, B, kernel=kernel), reference(A, B), tol=tolerance(kernel), what=f"{kernel} unaligned")


@pytest.mark.parametrize("kernel", rung_params())
def test_repeated_calls_are_deterministic(kernel, rng):
    A, B = random_matrix(rng, 130, 70), random_matrix(rng, 70, 90)
    first = fastsgemm.sgemm(A, B, kernel=kernel)
    for _ in range(3):
        np.testing.assert_array_equal(fastsgemm.sgemm(A, B, kernel=kernel), first)


@pytest.mark.gpu
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize("m,n,k", [(301, 517, 133), (256, 512, 64), (64, 96, 20000)], ids=["edges", "whole-tiles", "long-k"])
def test_reuse_gives_regbuffers_bits(layout_a, layout_b, m, n, k, rng):
    """Rung 15 (reuse) changes only the order of rung 14's FFMAs across accumulators, never the order in which
    one accumulator adds its k-steps: its results must be rung 14's, bit for bit, in every layout, at the
    edges, on whole tiles and on a long K that split-K slices."""
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    _, view_a = in_layout(A, layout_a)
    _, view_b = in_layout(B, layout_b)
    results = {}
    for kernel in ("regbuffer", "reuse"):
        out = np.full((m, n), np.nan, np.float32)
        fastsgemm.sgemm(view_a, view_b, out=out, kernel=kernel)
        results[kernel] = out
    assert_close(results["reuse"], reference(A, B), tol=tolerance("reuse"), what=f"reuse A {layout_a}, B {layout_b}")
    np.testing.assert_array_equal(results["reuse"].view(np.uint32), results["regbuffer"].view(np.uint32))
