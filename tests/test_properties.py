"""Property-based tests (hypothesis): random shapes (0 to 40 each way), any
layout of A, B, C and out, alpha and beta, NaN and Inf, each compared with
float64 numpy.matmul. A bounded budget runs on the cpu rung everywhere (CI);
every CUDA rung gets its own on device arrays. FASTSGEMM_HYPOTHESIS_EXAMPLES
sets the budget per rung."""
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import fastsgemm  # noqa: E402
from conftest import LAYOUTS, in_layout, rung_params, tolerance  # noqa: E402

EXAMPLES = int(os.environ.get("FASTSGEMM_HYPOTHESIS_EXAMPLES", "150"))
SPECIALS = [np.nan, np.inf, -np.inf]


@st.composite
def problems(draw):
    shape = (draw(st.integers(0, 40)), draw(st.integers(0, 40)), draw(st.integers(0, 40)))
    layouts = [draw(st.sampled_from(sorted(LAYOUTS))) for _ in range(4)]  # A, B, C, out
    alpha = draw(st.sampled_from([1.0, 0.5, -2.0, 3.25, 0.0]))
    beta = draw(st.sampled_from([0.0, 1.0, -0.5, 2.0]))
    with_c = beta != 0.0 or draw(st.booleans())
    with_out = draw(st.booleans())
    # NaN/Inf only where BLAS and numpy agree: with alpha == 0 BLAS may skip A @ B altogether.
    specials = draw(st.lists(st.tuples(st.sampled_from("AB"), st.integers(0, 10**6), st.sampled_from(SPECIALS)),
                             max_size=0 if alpha == 0.0 else 2))
    seed = draw(st.integers(0, 2**32 - 1))
    return shape, layouts, alpha, beta, with_c, with_out, specials, seed


def check(kernel, problem, to_side=lambda x: x, to_host=np.asarray):
    (m, n, k), (la, lb, lc, lo), alpha, beta, with_c, with_out, specials, seed = problem
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k), dtype=np.float32)
    B = rng.standard_normal((k, n), dtype=np.float32)
    C = rng.standard_normal((m, n), dtype=np.float32)
    for which, position, value in specials:
        X = A if which == "A" else B
        if X.size:
            X.flat[position % X.size] = value
    _, a = in_layout(A, la, to_side)
    _, b = in_layout(B, lb, to_side)
    _, c = in_layout(C, lc, to_side) if with_c else (None, None)
    _, out = in_layout(np.full((m, n), np.nan, np.float32), lo, to_side) if with_out else (None, None)

    result = fastsgemm.sgemm(a, b, c, alpha=alpha, beta=beta, out=out, kernel=kernel)
    if with_out:
        assert result is out
    got = to_host(result).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = alpha * (A.astype(np.float64) @ B.astype(np.float64))
        if beta != 0.0:
            expected = expected + beta * C
    assert got.shape == (m, n)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))
    # The error is measured against the size of what was summed (|alpha| |A| |B| + |beta| |C|, the scale of
    # the BLAS error bound), not of the result: where beta C nearly cancels alpha A B the result can be a
    # hundred times smaller than its terms, and any FP32 sum's rounding looks a hundred times larger against it.
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = abs(alpha) * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)))
        if beta != 0.0:
            magnitude = magnitude + abs(beta) * np.abs(C.astype(np.float64))
    finite = np.isfinite(expected) & np.isfinite(magnitude)
    if finite.any():
        scale = max(np.linalg.norm(magnitude[finite]), 1e-30)
        assert np.linalg.norm(got[finite] - expected[finite]) / scale <= tolerance(kernel)


@pytest.mark.parametrize("kernel", rung_params("cpu"))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems())
def test_cpu_rung_matches_numpy(kernel, problem):
    check(kernel, problem)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", rung_params("cuda"))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems())
def test_cuda_rungs_match_numpy_on_device_arrays(kernel, problem):
    cupy = pytest.importorskip("cupy")
    check(kernel, problem, to_side=cupy.asarray, to_host=cupy.asnumpy)
