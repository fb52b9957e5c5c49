"""Shared test machinery: the `gpu` marker, rung parametrisation from the
registry, matrices in every layout, and the float64 reference check.

Seeds are fixed so failures reproduce; set FASTSGEMM_TEST_SEED to draw others.
"""
import os

import numpy as np
import pytest

import fastsgemm

SEED = int(os.environ.get("FASTSGEMM_TEST_SEED", "20261122"))
FP32_TOLERANCE = fastsgemm._registry.ERROR_BOUND["fp32"]  # relative Frobenius error against float64, K <= 4096
TF32_TOLERANCE = fastsgemm._registry.ERROR_BOUND["tf32"]  # operands rounded to TF32
_PRECISION = {k.name: k.precision for k in fastsgemm.kernels()}


def tolerance(kernel):
    """The relative Frobenius error a rung (or "rung:config") must meet on random data: FP32's, or TF32's
    for the rungs that round their operands to TF32 (the registry's precision)."""
    return TF32_TOLERANCE if _PRECISION.get(kernel.partition(":")[0], "fp32") == "tf32" else FP32_TOLERANCE


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not fastsgemm.cuda_available():
        pytest.skip(f"needs a CUDA device: {fastsgemm._api.cuda_status()[1]}")
    if item.get_closest_marker("sanitizer") is not None and "sanitizer" not in item.config.getoption("markexpr"):
        pytest.skip("compute-sanitizer runs take minutes: opt in with -m sanitizer")


def rung_params(device=None, precision=None):
    """One pytest.param per registered rung and per other configuration of a rung ("warptile:64x64x16"),
    optionally only "cpu" or "cuda" ones, only "fp32" or "tf32" ones; GPU rungs marked `gpu`."""
    return [
        pytest.param(name, marks=[pytest.mark.gpu] if k.device == "cuda" else [], id=name)
        for k in fastsgemm.kernels()
        if (device is None or k.device == device) and (precision is None or k.precision == precision)
        for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs))
    ]


@pytest.fixture
def rng(request):
    # A fresh stream per test, derived from the seed and the test's name, so tests stay independent.
    return np.random.default_rng([SEED, *request.node.nodeid.encode()])


def random_matrix(rng, rows, cols):
    return rng.standard_normal((rows, cols), dtype=np.float32)


# ---- layouts: each makes a view equal to X whose memory around it is NaN ----
# (base maker, view taker). The view taker uses only slicing and .T, so it works on NumPy, CuPy and torch
# arrays built from the same base. Offsets make pointers that are not 16-byte aligned and leading
# dimensions that are not multiples of 4.


def _row(x):
    return x.copy(), lambda b: b


def _col(x):
    return x.T.copy(), lambda b: b.T


def _row_padded(x):
    r, c = x.shape
    base = np.full((r + 1, c + 3), np.nan, np.float32)
    base[1:, 1 : c + 1] = x
    return base, lambda b: b[1:, 1 : c + 1]


def _col_padded(x):
    r, c = x.shape
    base = np.full((c + 2, r + 5), np.nan, np.float32)
    base[1 : c + 1, 3 : r + 3] = x.T
    return base, lambda b: b[1 : c + 1, 3 : r + 3].T


def _strided(x):
    r, c = x.shape
    base = np.full((2 * r, 3 * c), np.nan, np.float32)
    base[::2, ::3] = x
    return base, lambda b: b[::2, ::3]


def _negative(x):
    return x[::-1, ::-1].copy(), lambda b: b[::-1, ::-1]


LAYOUTS = {
    "row": _row,
    "col": _col,
    "row_padded": _row_padded,
    "col_padded": _col_padded,
    "strided": _strided,
    "negative": _negative,
}


def in_layout(x, layout, to_side=lambda a: a):
    """(base, view) with view == x in `layout`; to_side moves the base to a device framework first."""
    base, take = LAYOUTS[layout](np.asarray(x))
    base = to_side(base)
    return base, take(base)


def reference(A, B, C=None, alpha=1.0, beta=0.0):
    ref = alpha * (np.asarray(A, np.float64) @ np.asarray(B, np.float64))
    if beta != 0.0:
        ref += beta * np.asarray(C, np.float64)
    return ref


def assert_close(result, ref, tol=FP32_TOLERANCE, what=""):
    """Relative Frobenius error <= tol, no NaN where the reference has none; reports first mismatches."""
    result = np.asarray(result, np.float64)
    assert result.shape == ref.shape, f"{what}: shape {result.shape}, expected {ref.shape}"
    if ref.size == 0:
        return
    bad_nan = np.argwhere(np.isnan(result) != np.isnan(ref))
    assert bad_nan.size == 0, f"{what}: NaN where the reference has none (or the reverse) at {bad_nan[:5].tolist()}"
    norm = np.linalg.norm(ref)
    error = np.linalg.norm(result - ref) / (norm if norm > 0 else 1.0)
    if not error <= tol:
        diff = np.abs(result - ref)
        worst = np.argsort(diff, axis=None)[::-1][:5]
        rows = [
            f"  [{i}, {j}] got {result[i, j]!r} expected {ref[i, j]!r}"
            for i, j in zip(*np.unravel_index(worst, ref.shape))
        ]
        raise AssertionError(f"{what}: relative error {error:.3e} > {tol:.1e}; largest differences:\n" + "\n".join(rows))
