"""The public API: sgemm, sgemm_raw, auto_kernel, cuda_available, device_info (the registry's view, kernels()
and KERNELS, is fastsgemm._registry)."""
from __future__ import annotations

import functools
import numbers
import threading
import warnings
import numpy as np

from . import _sgemm
from . import _tuning
from ._device_array import DeviceArray, record_writer
from ._registry import INDEX, REGISTRY, Kernel, parse_kernel
from ._operands import (CUDA, check_stream_handle, describe, differentiable_product, empty_like_framework,
                        is_device_array, operand_device, records_gradient, to_operand, torch_tensors, untracked,
                        working_stream)

CudaError = _sgemm.CudaError


@functools.lru_cache(maxsize=None)
def cuda_status() -> tuple[bool, str]:
    try:
        count = _sgemm.device_count()
    except CudaError as error:
        return False, str(error)
    return (True, "") if count > 0 else (False, "no CUDA device found")


def cuda_available() -> bool:
    """Whether a CUDA device and driver are usable from this process."""
    return cuda_status()[0]


def require_cuda() -> None:
    """CudaError, with CUDA's reason, where no GPU is usable."""
    if not cuda_available():
        raise CudaError(f"no usable CUDA device: {cuda_status()[1]}")


def device_count() -> int:
    """How many CUDA devices this process can use: 0 where none is (no GPU, no driver, or one too old)."""
    return _sgemm.device_count() if cuda_available() else 0


# FP32 lanes per SM by compute capability (major, minor); the default covers later chips.
_FP32_LANES = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}


def device_ordinal(device) -> int:
    """A CUDA device given as an ordinal, a torch.device ("cuda:1") or a CuPy Device, as its ordinal; None is the
    current device. ValueError for a device this machine does not have, TypeError for what is not a device."""
    if device is None:
        return _sgemm.current_device()
    if not _is_ordinal(device):
        if getattr(device, "type", None) == "cuda":  # a torch.device; torch.device("cuda") is the current device
            index = _sgemm.current_device() if device.index is None else device.index
        elif not hasattr(device, "type"):  # a CuPy Device
            index = getattr(device, "id", None)
        else:
            index = None
        if not _is_ordinal(index):
            raise TypeError(f"device must be a CUDA device ordinal, a torch.device('cuda:N') or a CuPy Device; "
                            f"got {device!r}")
        device = index
    count = _sgemm.device_count()
    if not 0 <= int(device) < count:
        raise ValueError(f"device {int(device)} does not exist: this machine has {count} CUDA device(s)")
    return int(device)


def _is_ordinal(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def device_info(device=None) -> dict:
    """The GPU's name, SM count, compute capability, clocks and FP32 peak in GFLOP/s (at the maximum SM clock), of
    `device` (an ordinal, a torch.device or a CuPy Device; the current device when None).

    Raises CudaError when there is no usable device."""
    require_cuda()
    info = _sgemm.device_info(device_ordinal(device))
    lanes = _FP32_LANES.get(tuple(info["compute_capability"]), 128)
    info["fp32_lanes_per_sm"] = lanes
    info["fp32_peak_gflops"] = info["sm_count"] * lanes * 2 * info["sm_clock_mhz"] / 1000.0
    return info


# Set once the no-GPU warning of kernel='auto' has been given: it is given once per process (a test clears it).
AUTO_FALLBACK_WARNED = threading.Event()


def resolve_kernel(kernel, on_device: bool) -> Kernel | None:
    """The kernel to run, checked against this machine; None for "auto" with a GPU: the shape decides
    (auto_choice_on) once it is known."""
    choice = parse_kernel(kernel)
    if choice is None:
        if cuda_available():
            return None
        if on_device:
            raise CudaError(f"device arrays given but no usable CUDA device: {cuda_status()[1]}")
        if not AUTO_FALLBACK_WARNED.is_set():
            AUTO_FALLBACK_WARNED.set()
            warnings.warn(
                f"fastsgemm: no usable CUDA device ({cuda_status()[1]}); kernel='auto' runs the 'cpu' rung",
                RuntimeWarning,
                stacklevel=3,
            )
        return Kernel(INDEX["cpu"], -1)
    if REGISTRY[choice.rung].device == "cuda" and not cuda_available():
        raise CudaError(f"kernel {kernel!r} needs a CUDA device and none is usable: {cuda_status()[1]}")
    return choice


def auto_choice_on(device: int | None, m: int, n: int, k: int, count: int = 1) -> Kernel:
    """What kernel="auto" runs for an m x n x k problem, or a stack of `count` of them, on CUDA device `device`
    (the current one when None), from fastsgemm._tuning. The C fast path asks this once per device, shape and
    count (csrc/fast_call.c) and remembers it."""
    return parse_kernel(_tuning.choose(_sgemm.current_device() if device is None else device, m, n, k, count))


_sgemm.register_fast_path(np.ndarray, np.empty, np.dtype(np.float32), DeviceArray, auto_choice_on)


def auto_kernel(M: int, N: int, K: int, device=None, *, count: int = 1) -> str:
    """The kernel that kernel="auto" runs for an M x N x K problem on `device` (an ordinal, a torch.device or a
    CuPy Device; the current device when None): the one measured fastest at the nearest tuned shape on that GPU
    (python -m fastsgemm.tune), FP32-accurate rungs only; "cublas" where that GPU was never tuned, "cpu" without a
    usable GPU (CudaError then if a device was named). Device operands are computed on their own GPU, with the
    kernel this names for that GPU.

    count > 1: the kernel fastsgemm.matmul runs for a stack of `count` such products, each with its own A and B
    (a stack whose shared operand lets its products lie end to end runs as one product, and takes that
    product's kernel)."""
    for name, value in (("M", M), ("N", N), ("K", K)):
        if not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    if not cuda_available():
        if device is not None:
            raise CudaError(f"device {device!r} given but no usable CUDA device: {cuda_status()[1]}")
        return "cpu"
    return auto_choice_on(device_ordinal(device), int(M), int(N), int(K), int(count)).name


def auto_reason(M: int, N: int, K: int, device=None) -> str:
    """Why kernel="auto" runs auto_kernel(M, N, K, device) for one M x N x K product, as a clause: the measured shape
    behind the choice and whose tuning it is (this GPU's, or a tuned GPU's of the same compute capability), that
    the GPU was never tuned (so cuBLAS), or that there is no usable GPU (so the cpu rung)."""
    auto_kernel(M, N, K, device)  # the same checks of the arguments and the device
    if not cuda_available():
        return f"no usable CUDA device ({cuda_status()[1]}), so the cpu rung"
    return _tuning.explain(_sgemm.current_device() if device is None else device_ordinal(device), int(M), int(N),
                           int(K))


def _real(name, value) -> float:
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    return float(value)


def sgemm(A, B, C=None, *, alpha=1.0, beta=0.0, out=None, kernel="auto"):
    """alpha * A @ B + beta * C in float32, with one rung of the ladder.

    A (M x K) and B (K x N) are float32 matrices, all on the host (NumPy or any buffer) or all on a CUDA
    device (CuPy, PyTorch, anything with __cuda_array_interface__ or __dlpack__). Any strides work:
    row- and column-major layouts reach the kernel without a copy, other layouts are copied once.

    C (M x N) is read only when beta != 0 and is never modified unless it is also `out`; out=C gives BLAS's
    in-place update. `out` (M x N float32, on the inputs' side) receives the result and is returned.
    Otherwise a new matrix is returned: NumPy for host inputs, the inputs' framework for torch and CuPy,
    a fastsgemm.DeviceArray for other device inputs. Device work is queued on the caller's current stream
    and is not waited for; host inputs are waited for. A cpu-rung call stopped by Ctrl-C (KeyboardInterrupt
    between its panels of 256 or more columns) leaves in `out` the result in the panels that finished and
    the old values in the other columns.

    kernel names a rung (see fastsgemm.KERNELS), a rung in another configuration ("warptile:128x128x16",
    see fastsgemm.kernels()), or "auto": the FP32-accurate kernel measured fastest for this shape on this
    GPU (fastsgemm.auto_kernel tells which).
    """
    # Torch tensors, CuPy arrays, DeviceArrays and NumPy arrays of the usual kinds are read and run in one C call
    # (csrc/fast_call.c); it declines everything else before touching the GPU, and the general path below runs.
    result = _sgemm.sgemm_fast(A, B, C, out, alpha, beta, kernel)
    if result is not NotImplemented:
        return result
    alpha = _real("alpha", alpha)
    beta = _real("beta", beta)
    # Matrices autograd would record: the fast path leaves them to us (other ranks: the shape error below).
    if records_gradient(A, B, C, out) and torch_tensors(A, B) and A.dim() == 2 and B.dim() == 2:
        if C is not None or out is not None or alpha != 1.0 or beta != 0.0:
            raise RuntimeError("sgemm: an operand requires grad, and sgemm with C, alpha, beta or out= records no "
                               "gradient; use fastsgemm.matmul(A, B) (differentiable on such tensors, as is "
                               "fastsgemm.torch) or pass .detach()ed tensors")
        return differentiable_product("sgemm", A, B, kernel)
    A, B, C, out = untracked(A), untracked(B), untracked(C), untracked(out)
    if C is None and beta != 0.0:
        raise ValueError(f"beta={beta} needs a C matrix; pass C or leave beta at 0")
    on_device = is_device_array(A)
    choice = resolve_kernel(kernel, on_device)

    a = to_operand("A", A)
    stream = working_stream(a) if a.side == CUDA else None
    b = to_operand("B", B, consumer_stream=stream)
    c = to_operand("C", C, consumer_stream=stream) if C is not None else None
    o = to_operand("out", out, writable=True, consumer_stream=stream) if out is not None else None
    operands = [op for op in (a, b, c, o) if op is not None]

    for op in operands[1:]:
        if op.side != a.side:
            raise ValueError(
                f"A is a {a.side} array ({describe(A)}) but {op.name} is a {op.side} array "
                f"({describe(op.source)}); put all operands on the same side"
            )
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"shapes {a.shape} (A) and {b.shape} (B) not aligned: {k} (dim 1) != {k2} (dim 0)")
    for op in (c, o):
        if op is not None and op.shape != (m, n):
            raise ValueError(f"{op.name} must have shape {(m, n)} for A {a.shape} @ B {b.shape}, got {op.shape}")

    # The operands' GPU (the first that names one), which the work runs on; None for host operands and empty ones.
    device = next((d for d in map(operand_device, operands) if d is not None), None) if a.side == CUDA else None
    if choice is None:
        choice = auto_choice_on(device, m, n, k)

    if o is None:
        result = empty_like_framework(a, (m, n))
        o = to_operand("out", result, writable=True, consumer_stream=stream)
    else:
        result = out

    if stream is not None:
        for op in operands:
            if op.producer_stream is not None:
                _sgemm.stream_wait(stream, op.producer_stream, device)
    _sgemm.gemm(choice, a.core, b.core, c.core if c is not None else None, o.core, alpha, beta, stream)

    if isinstance(result, DeviceArray):
        record_writer(result, stream)
    if any(op.keep_alive for op in operands):
        # DLPack producers may free their memory once their deleter runs: finish the work first.
        _sgemm.synchronize(stream, device)
    return result


def sgemm_raw(M, N, K, alpha, A_ptr, lda, B_ptr, ldb, beta, C_ptr, ldc, *, kernel="auto", stream=0,
              trans_a=False, trans_b=False):
    """C = alpha * op(A) @ op(B) + beta * C on raw device pointers, row-major, queued on `stream`.

    A is M x K (K x M stored, read transposed, when trans_a), B is K x N (likewise trans_b), C is M x N in
    place; leading dimensions are in elements. `stream` is a cudaStream_t as an integer (0: the legacy
    default stream). C is not read when beta == 0. Returns without waiting for the GPU.

    Each matrix the pointers and leading dimensions describe must lie inside the device allocation its
    pointer belongs to (ValueError otherwise, before anything runs). The stream is checked for plausibility
    only (0, 1, 2, or an aligned pointer-sized integer): a handle that passes is trusted to be a live stream.
    """
    dims = {"M": M, "N": N, "K": K, "lda": lda, "ldb": ldb, "ldc": ldc}
    for name, value in dims.items():
        if not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    a_cols, b_cols = (M if trans_a else K), (K if trans_b else N)
    for name, ld, cols in (("lda", lda, a_cols), ("ldb", ldb, b_cols), ("ldc", ldc, N)):
        if ld < max(1, cols):
            raise ValueError(f"{name}={ld} is smaller than the {cols} elements of a stored row")
    alpha, beta = _real("alpha", alpha), _real("beta", beta)
    stream = check_stream_handle("stream", stream)
    choice = resolve_kernel(kernel, on_device=True) or auto_choice_on(None, M, N, K)
    if REGISTRY[choice.rung].device != "cuda":
        raise ValueError(f"sgemm_raw takes device pointers; kernel {kernel!r} runs on the host")
    a = (int(A_ptr), M, K, 1, lda) if trans_a else (int(A_ptr), M, K, lda, 1)
    b = (int(B_ptr), K, N, 1, ldb) if trans_b else (int(B_ptr), K, N, ldb, 1)
    c = (int(C_ptr), M, N, ldc, 1)
    _sgemm.gemm(choice, a, b, c, c, alpha, beta, stream)  # C is not read when beta == 0


__all__ = [
    "CudaError",
    "auto_kernel",
    "auto_reason",
    "cuda_available",
    "device_count",
    "device_info",
    "sgemm",
    "sgemm_raw",
]
