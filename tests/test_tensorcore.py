"""The tensor-core rungs' accuracy promises, on the GPU.

tf32 rounds its operands to TF32: its error should be cuBLAS TF32's, not
FP32's. tf32x3 splits each operand into two TF32 parts: its error must stay
within 2x cuBLAS FP32 SGEMM's on the same inputs, at K = 4096 (one pass, no
split-K) and K = 16384, and its Inf and NaN must be numpy's even where the
correction terms alone would turn Inf into NaN.
"""
import numpy as np
import pytest

import fastsgemm
from conftest import random_matrix, reference

pytestmark = pytest.mark.gpu


def relative_error(kernel, A, B, exact):
    result = fastsgemm.sgemm(A, B, kernel=kernel).astype(np.float64)
    return np.linalg.norm(result - exact) / np.linalg.norm(exact)


@pytest.mark.parametrize("k", [4096, 16384])
def test_tf32x3_within_twice_cublas_fp32(k, rng):
    A, B = random_matrix(rng, 256, k), random_matrix(rng, k, 256)
    exact = reference(A, B)
    mine, cublas = relative_error("tf32x3", A, B, exact), relative_error("cublas", A, B, exact)
    assert mine <= 2 * cublas, f"tf32x3 error {mine:.2e} vs cuBLAS FP32 {cublas:.2e} at K = {k}"


def test_tf32x3_keeps_bits_tf32_loses(rng):
    """The split recovers what rounding to TF32 loses: two orders of magnitude at least."""
    A, B = random_matrix(rng, 128, 1024), random_matrix(rng, 1024, 128)
    exact = reference(A, B)
    one, three = relative_error("tf32", A, B, exact), relative_error("tf32x3", A, B, exact)
    assert three * 100 < one, f"tf32x3 {three:.2e} vs tf32 {one:.2e}"


@pytest.mark.parametrize("k", [1024, 4096])
def test_tf32_error_like_cublas_tf32(k, rng):
    A, B = random_matrix(rng, 256, k), random_matrix(rng, k, 256)
    exact = reference(A, B)
    mine, cublas = relative_error("tf32", A, B, exact), relative_error("cublas_tf32", A, B, exact)
    assert mine <= 2 * cublas, f"tf32 error {mine:.2e} vs cuBLAS TF32 {cublas:.2e}"
    assert 1e-5 < mine < 1e-3, f"tf32 error {mine:.2e} is not TF32's (about 3e-4)"


@pytest.mark.parametrize("kernel", ["tf32", "tf32x3"])
def test_inf_times_tf32_exact_values_stays_inf(kernel):
    """B's entries are exact in TF32, so their low parts are 0 and hi(Inf) * lo(B) is Inf * 0 = NaN in a
    correction term: the result must still be numpy's +-Inf."""
    A = np.ones((20, 24), np.float32)
    B = np.full((24, 18), 0.5, np.float32)
    A[2, 3] = np.inf
    A[5, 0] = -np.inf
    A[7, 1] = np.nan
    B[4, 9] = 0.0  # no effect on the Inf rows: A[2, 4] is finite
    with np.errstate(invalid="ignore"):
        expected = A.astype(np.float64) @ B.astype(np.float64)
    result = fastsgemm.sgemm(A, B, kernel=kernel).astype(np.float64)
    np.testing.assert_array_equal(np.isposinf(result), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(result), np.isneginf(expected))
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(result[finite], expected[finite])  # 12 and 11.5: exact in every precision


@pytest.mark.parametrize("kernel", ["tf32", "tf32x3"])
def test_hopper_default_and_the_mma_sync_path_differ(kernel, rng):
    """On compute capability 9.0, the tensor-core rungs run wgmma and their ":mma.sync" configuration the
    Ampere and Ada path (every correctness test runs both). The two sum in different orders, so different
    bits show two paths ran."""
    if tuple(fastsgemm.device_info()["compute_capability"]) != (9, 0):
        pytest.skip("only compute capability 9.0 has the wgmma path")
    A, B = random_matrix(rng, 256, 512), random_matrix(rng, 512, 256)
    exact = reference(A, B)
    default, ampere = fastsgemm.sgemm(A, B, kernel=kernel), fastsgemm.sgemm(A, B, kernel=kernel + ":mma.sync")
    assert not np.array_equal(default, ampere), f"{kernel} and {kernel}:mma.sync gave the same bits"
    bound = fastsgemm._api.ERROR_BOUND[next(k.precision for k in fastsgemm.kernels() if k.name == kernel)]
    for result in (default, ampere):
        assert np.linalg.norm(result - exact) / np.linalg.norm(exact) < bound
