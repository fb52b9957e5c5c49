"""What a test suite or a benchmark needs to check fastsgemm's results: the error bounds it promises, the error
measure they are stated in, and random matrices made on the GPU. Public and stable, as the rest of the API is;
fastsgemm's own tests and benchmarks use it rather than private names.

    import numpy as np, fastsgemm, fastsgemm.testing as ft

    A = ft.random_device_matrix(512, 256, seed=1)
    B = ft.random_device_matrix(256, 384, seed=2)
    C = fastsgemm.sgemm(A, B, kernel="tf32x3")
    exact = A.numpy().astype(np.float64) @ B.numpy().astype(np.float64)
    assert ft.relative_error(C, exact) <= ft.error_bound("tf32x3")

The bounds hold on random data (normal or uniform) with K up to 4096; docs/guarantees.md says what each means and
where it does not hold.
"""
from __future__ import annotations

import types

import numpy as np

from . import _benchmark, _sgemm
from ._api import cuda_status, device_ordinal, require_cuda
from ._device_array import DeviceArray
from ._registry import ERROR_BOUND as _ERROR_BOUND
from ._registry import REGISTRY, parse_kernel

ERROR_BOUND = types.MappingProxyType(_ERROR_BOUND)
"""The relative Frobenius error against float64 that each precision class promises, by class: "fp32" (FP32's own),
"near-fp32" and "tf32" (the kernels that round their operands to TF32). Read-only."""


def error_bound(kernel: str) -> float:
    """The relative Frobenius error against float64 that `kernel` (any name sgemm takes: "tf32x3",
    "warptile:64x64x16", "cublas_tf32", "auto") promises on random data. "auto" runs FP32-accurate kernels only.
    ValueError for an unknown name."""
    choice = parse_kernel(kernel)
    return ERROR_BOUND["fp32"] if choice is None else ERROR_BOUND[REGISTRY[choice.rung].precision]


def _on_host(x) -> np.ndarray:
    """x as a NumPy array in host memory: NumPy arrays as they are; DeviceArrays, CuPy arrays and torch tensors
    (any device, gradient or not) copied back."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, DeviceArray):
        return x.numpy()
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return x.detach().cpu().numpy()
    if module == "cupy":
        return x.get()
    return np.asarray(x)


def relative_error(result, reference) -> float:
    """||result - reference|| / ||reference|| (Frobenius norms), computed in float64, the measure the error bounds
    are stated in; the absolute error where the reference is all zeros. Either may be a NumPy array, a DeviceArray,
    a CuPy array or a torch tensor; shapes must agree."""
    got, want = _on_host(result), _on_host(reference)
    if got.shape != want.shape:
        raise ValueError(f"relative_error: shapes {got.shape} and {want.shape} differ")
    return _benchmark._relative_error(got, want)


def random_device_matrix(rows: int, cols: int, *, seed: int = 0, device=None) -> DeviceArray:
    """A rows x cols float32 DeviceArray of uniform random values in [-1, 1), made on the GPU (no host copy, so a
    16384^2 input costs milliseconds); the same values for the same seed. `device`: None or the calling thread's
    current device, as an ordinal, a torch.device or a CuPy Device: the values are made by a kernel on the current
    device, so another device is refused (ValueError; make it current first, e.g. with torch.cuda.device).
    CudaError where no GPU is usable."""
    current = current_device()
    ordinal = current if device is None else device_ordinal(device)
    if ordinal != current:
        raise ValueError(f"random_device_matrix makes its values on the current device ({current}), not on device "
                         f"{ordinal}: make that device current first")
    return _benchmark.random_device_matrix(rows, cols, seed, ordinal)


def why_no_gpu() -> str:
    """Why no CUDA device is usable here (CUDA's own message, or "no CUDA device found"); "" where one is: the
    reason a test that needs a GPU gives when it skips."""
    return cuda_status()[1]


def current_device() -> int:
    """The CUDA runtime's current device on the calling thread, as fastsgemm's own runtime sees it: a test that a
    call leaves it where it found it. CudaError where no GPU is usable."""
    require_cuda()
    return _sgemm.current_device()


__all__ = ["ERROR_BOUND", "current_device", "error_bound", "random_device_matrix", "relative_error", "why_no_gpu"]
