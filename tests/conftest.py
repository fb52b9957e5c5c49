"""Shared test machinery: the `gpu` marker, rung parametrisation from the
registry, matrices in every layout, and the float64 reference check.

Seeds are fixed so failures reproduce; set FASTSGEMM_TEST_SEED to draw others.

Tests reach the package through its public API and fastsgemm.testing (error bounds, random device matrices).
Private names appear only where a test is about that private piece itself: the tuner's and the registry's
choices, the C entry points that forge lying operands or time a kernel, the build's own functions
(tests/test_testing_module.py lists each use and fails on any other).
"""
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing

SEED = int(os.environ.get("FASTSGEMM_TEST_SEED", "20261122"))
FP32_TOLERANCE = fastsgemm.testing.ERROR_BOUND["fp32"]  # relative Frobenius error against float64, K <= 4096
TF32_TOLERANCE = fastsgemm.testing.ERROR_BOUND["tf32"]  # operands rounded to TF32
_PRECISION = {k.name: k.precision for k in fastsgemm.kernels()}


def tolerance(kernel):
    """The relative Frobenius error a rung (or "rung:config") must meet on random data: FP32's, or TF32's
    for the rungs that round their operands to TF32 (the registry's precision)."""
    return TF32_TOLERANCE if _PRECISION.get(kernel.partition(":")[0], "fp32") == "tf32" else FP32_TOLERANCE


def run_at_once(commands, timeout=300):
    """Runs each command (key -> argv) as its own process, several at once (one per core, at most 16), and returns
    key -> subprocess.CompletedProcess with text output: for tests whose time is mostly a fresh interpreter's start
    and imports. A process past `timeout` seconds is killed and answers with return code None and its output so
    far, so that only its own test fails."""
    def run(item):
        key, argv = item
        try:
            return key, subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            text = [x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr)]
            return key, subprocess.CompletedProcess(argv, None, text[0], text[1] + f"\n(killed after {timeout} s)")

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        return dict(pool.map(run, commands.items()))


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not fastsgemm.cuda_available():
        pytest.skip(f"needs a CUDA device: {fastsgemm.testing.why_no_gpu()}")
    if item.get_closest_marker("sanitizer") is not None and "sanitizer" not in item.config.getoption("markexpr"):
        pytest.skip("compute-sanitizer runs take minutes: opt in with -m sanitizer")
    if item.get_closest_marker("compiler") is not None and "compiler" not in item.config.getoption("markexpr"):
        pytest.skip("the compiler checks build every rung with nvcc, minutes: opt in with -m compiler")


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


# ---- the wgmma rungs: where they run, raw calls in every layout, which kernels a call launched ----


TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]  # A, B stored column-major (run_raw)
TRANSPOSE_IDS = [f"{'col' if a else 'row'}_{'col' if b else 'row'}" for a, b in TRANSPOSES]


def needs_hopper():
    if tuple(fastsgemm.device_info()["compute_capability"]) != (9, 0):
        pytest.skip("only compute capability 9.0 has the wgmma paths")


def run_raw(kernel, A, B, trans_a, trans_b, alpha=1.0, beta=0.0, C=None, pad=False):
    """sgemm_raw with A and B stored row- or column-major on the device, into an output poisoned with NaN (or C).
    pad: each stored line of A and B (a row, or a column where stored column-major) is followed by NaN up to a
    multiple of 4 floats, so that the leading dimensions are ones the copy engine takes (rungs 24 and 23) and
    any read past a matrix's edge shows."""
    m, k = A.shape
    n = B.shape[1]

    def stored(X, transposed):
        lines = np.ascontiguousarray(X.T) if transposed else X
        if not pad:
            return fastsgemm.to_device(lines), lines.shape[1]
        padded = np.full((lines.shape[0], -(-lines.shape[1] // 4) * 4), np.nan, np.float32)
        padded[:, : lines.shape[1]] = lines
        return fastsgemm.to_device(padded), padded.shape[1]

    (a, lda), (b, ldb) = stored(A, trans_a), stored(B, trans_b)
    out = fastsgemm.to_device(np.full((m, n), np.nan, np.float32) if C is None else C)
    fastsgemm.sgemm_raw(m, n, k, alpha, a.ptr, lda, b.ptr, ldb, beta, out.ptr, n, kernel=kernel, trans_a=trans_a,
                        trans_b=trans_b)
    return out.numpy()


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


# ---- the copy-engine rungs (23 tf32x3_inplace, 24 tf32_tma): cases both test files run ----

# Where a call goes: the copy engine takes 16-byte aligned matrices with a k-contiguous operand.
COPY_ENGINE_CASES = ["row-major A and B", "column-major B", "column-major A and B", "column-major A, row-major B",
                     "an A 4 bytes off 16-byte alignment", "an lda that is no multiple of 4"]
COPY_ENGINE_TAKES = COPY_ENGINE_CASES[:3]


def copy_engine_case(torch, case, m=256, n=192, k=160):
    """Torch operands of one of COPY_ENGINE_CASES."""
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
    return a, b


def copy_engine_stacks(torch, seed):
    """Stacks through the tensor maps' third dimension: each product's own A and B, a shared A (B's stack every
    other matrix, so the products do not fold into one), a shared B (one launch of the stack, not a tall matrix:
    the output's stack is strided), both column-major, a stack step that is no multiple of 4 floats (the rung's
    fallback runs it), and stacks whose operands' matrices overlap one another. Leading dimensions are multiples
    of 4 floats but where a case says otherwise, so that the copy engine's path is the one tested."""
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=generator)

    return {
        "own A and B": (randn(6, 130, 100), randn(6, 100, 272)),  # 272: wider than one 256-row tile
        "128^3 stack": (randn(40, 128, 128), randn(40, 128, 128)),
        "shared A": (randn(130, 100), randn(12, 100, 72)[::2]),
        "shared B": (randn(5, 2, 64, 96)[:, 0], randn(96, 80)),
        "column-major": (randn(4, 100, 132).transpose(1, 2), randn(4, 72, 100).transpose(1, 2)),
        "odd step": (randn(5 * 2950).as_strided((5, 67, 43), (2950, 44, 1)), randn(5, 43, 45)),
        # Each product's A starts 16 rows into the one before it: the copies of one read what another's read.
        "overlapping A's": (randn(7 * 16 * 48 + 64 * 48).as_strided((7, 64, 48), (16 * 48, 48, 1)), randn(7, 48, 72)),
        "overlapping B's (column-major)": (randn(6, 96, 40), randn(6 * 8 * 40 + 88 * 40).as_strided(
            (6, 40, 88), (8 * 40, 1, 40))),
    }


def assert_inf_and_nan_as_numpy(kernel):
    """Inf and NaN in both operands, through both orientations of a copy-engine rung (B row- and column-major):
    the result's Inf, -Inf and NaN are numpy's, and its finite values exact (ones and halves)."""
    A = np.ones((40, 48), np.float32)
    B = np.full((48, 36), 0.5, np.float32)
    A[2, 3], A[5, 0], A[7, 1] = np.inf, -np.inf, np.nan
    B[10, 9] = np.inf
    with np.errstate(invalid="ignore"):
        expected = A.astype(np.float64) @ B.astype(np.float64)
    for trans_b in (False, True):
        result = run_raw(kernel, A, B, False, trans_b).astype(np.float64)
        np.testing.assert_array_equal(np.isposinf(result), np.isposinf(expected))
        np.testing.assert_array_equal(np.isneginf(result), np.isneginf(expected))
        np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(result[finite], expected[finite])
