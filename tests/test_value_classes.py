"""Every value class on every FP32-accurate kernel (issue 45, part 2): subnormal results, subnormal inputs,
products and sums that overflow, a 2^120 range within a row, zero rows, signed zeros, and Inf and NaN, each against
float64 (the result rounded to float32 where that is what decides: overflow to Inf), with cuBLAS FP32 on the same
data beside it in the failure messages.

Shapes are small and odd (97 x 83 x 130): every class is about values, not speed. The promise tested is the
README's: FP32-accurate kernels are within FP32's error bound (1e-5 relative Frobenius against float64) on every
finite class, put Inf and NaN where float64 arithmetic does, and give exact zeros where the rows are zeros."""
import numpy as np
import pytest

import fastsgemm
from conftest import FP32_TOLERANCE, rung_params

M, N, K = 97, 83, 130
KERNELS = [*rung_params(device="cuda", precision="fp32"), pytest.param("auto", marks=pytest.mark.gpu, id="auto")]


def on_gpu(x):
    return fastsgemm.to_device(np.ascontiguousarray(x, np.float32))


def product(kernel, A, B):
    """A @ B with `kernel` on device arrays, out poisoned with NaN first."""
    out = on_gpu(np.full((A.shape[0], B.shape[1]), np.nan, np.float32))
    fastsgemm.sgemm(on_gpu(A), on_gpu(B), out=out, kernel=kernel)
    return out.numpy().astype(np.float64)


def relative_error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def signed_exponents(rng, shape, low, high):
    """+-2^e with e uniform in [low, high): values spread over the range, each exact in float32."""
    return (rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(low, high, shape))).astype(np.float32)


def finite_class(name, rng):
    """(A, B) of a class whose float64 product is finite and representable in float32."""
    normal = lambda shape, scale: (rng.standard_normal(shape) * scale).astype(np.float32)  # noqa: E731
    if name == "subnormal results":  # products near 1e-40: the results are float32 subnormals
        return normal((M, K), 1e-30), normal((K, N), 1e-10)
    if name == "subnormal inputs":  # A is all subnormal, the products normal
        return normal((M, K), 1e-39), normal((K, N), 1e4)
    if name == "2^120 range within a row":
        return signed_exponents(rng, (M, K), -60, 60), normal((K, N), 1.0)
    raise KeyError(name)


FINITE = ["subnormal results", "subnormal inputs", "2^120 range within a row"]

# The known gap (issue 45, part 2; docs/guarantees.md): the three-product TF32 kernels lose accuracy where results
# or inputs are subnormal. A subnormal input's low part lies below TF32's smallest number, and the tensor cores'
# sums of products near FP32's smallest lose what FP32's round-to-nearest FFMAs keep. Strict: the day a fix lands,
# these pass, and the mark must go. kernel="auto" has the gap where it runs one of them at this shape on this GPU:
# that is known only there, so its case checks the same way inside the test.
SUBNORMAL_GAP = ("tf32x3",)


def finite_params():
    params = []
    for name in FINITE:
        for kernel in KERNELS:
            gap = name.startswith("subnormal") and kernel.values[0].startswith(SUBNORMAL_GAP)
            marks = [*kernel.marks, *([pytest.mark.xfail(strict=True, reason="issue 45, part 2")] if gap else [])]
            params.append(pytest.param(name, kernel.values[0], marks=marks, id=f"{name}-{kernel.id}"))
    return params


@pytest.mark.gpu
@pytest.mark.parametrize("name, kernel", finite_params())
def test_finite_classes_are_fp32_accurate(kernel, name):
    rng = np.random.default_rng([45, FINITE.index(name)])
    A, B = finite_class(name, rng)
    want = A.astype(np.float64) @ B.astype(np.float64)
    assert np.isfinite(want).all() and (np.abs(want) < np.finfo(np.float32).max).all()  # the class is as named
    got = product(kernel, A, B)
    assert np.isfinite(got).all(), f"{kernel}, {name}: non-finite results"
    error = relative_error(got, want)
    ran = fastsgemm.auto_kernel(M, N, K) if kernel == "auto" else kernel
    known_gap = kernel == "auto" and name.startswith("subnormal") and ran.startswith(SUBNORMAL_GAP)
    if not error <= FP32_TOLERANCE:
        cublas = relative_error(product("cublas", A, B), want)
        message = f"{kernel} ({ran}), {name}: relative error {error:.2e} against float64 (cuBLAS FP32: {cublas:.2e})"
        if known_gap:
            pytest.xfail(f"issue 45, part 2: {message}")
        pytest.fail(message)
    assert not known_gap, f"auto ran {ran}, whose subnormal gap (issue 45, part 2) is marked: it passes now"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", ["products overflow", "sums overflow"])
def test_overflow_gives_inf_where_float32_cannot_hold_the_result(kernel, name):
    """Positive operands, so every element's float64 sum lies past float32's largest and rounds to +Inf, whatever
    the order of the sum: products past it (1e20 * 1e20), or products below it whose sum is not (1.5e19^2 * 130)."""
    rng = np.random.default_rng([45, 10 + (name == "sums overflow")])
    scale = 1e20 if name == "products overflow" else 1.5e19
    A = (rng.uniform(0.5, 1.0, (M, K)) * scale).astype(np.float32)
    B = (rng.uniform(0.5, 1.0, (K, N)) * scale).astype(np.float32)
    with np.errstate(over="ignore"):  # the overflow is the class
        want = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    assert np.isposinf(want).all()  # the class is as named
    got = product(kernel, A, B)
    assert np.isposinf(got).all(), f"{kernel}, {name}: {np.count_nonzero(~np.isposinf(got))} elements are not +Inf"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_rows_and_signed_zeros_give_exact_zeros(kernel):
    """Rows of A that are zeros, +0 or -0, give rows of C that are exactly zero, beside rows that are not."""
    rng = np.random.default_rng([45, 20])
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    A[::3] = 0.0
    A[1::3] = -0.0
    got = product(kernel, A, B)
    assert (got[::3] == 0).all() and (got[1::3] == 0).all(), f"{kernel}: zero rows gave non-zeros"
    want = A[2::3].astype(np.float64) @ B.astype(np.float64)
    assert relative_error(got[2::3], want) <= FP32_TOLERANCE, kernel


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_inf_and_nan_fall_where_float64_puts_them(kernel):
    """An Inf, a -Inf and a NaN in A and an Inf in B: the non-finite elements of the result, and their kinds, are
    float64's; every other element is FP32-accurate."""
    rng = np.random.default_rng([45, 30])
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    A[3, 7], A[50, 11], A[60, 20] = np.inf, -np.inf, np.nan
    B[100, 40] = np.inf
    with np.errstate(invalid="ignore"):
        want = A.astype(np.float64) @ B.astype(np.float64)
    got = product(kernel, A, B)
    for kind, test in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        mismatched = np.argwhere(test(got) != test(want))
        assert mismatched.size == 0, f"{kernel}: {kind} at other places than float64's, e.g. {mismatched[:5].tolist()}"
    finite = np.isfinite(want)
    assert finite.sum() > M * N // 2  # most of the result is finite, and checked below
    assert relative_error(got[finite], want[finite]) <= FP32_TOLERANCE, kernel
