"""Turning what users pass as A, B, C and out into what the C core takes.

Host matrices are anything NumPy can view without copying (ndarray, buffer
protocol, DLPack CPU tensors) and reach the core as float32 ndarrays. Device
matrices come through ``__cuda_array_interface__`` (v3) or DLPack and reach the
core as ``(pointer, rows, cols, row_stride, col_stride)`` tuples, strides in
elements. Nothing here copies device memory; a host array is copied only when
it is misaligned.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _sgemm

HOST, CUDA = "host", "cuda"

# DLPack device types (dlpack.h).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_FLOAT = 2


@dataclass
class Operand:
    """One matrix argument, ready for the C core."""

    name: str
    side: str  # HOST or CUDA
    shape: tuple
    core: Any  # ndarray (host) or (ptr, rows, cols, rs, cs) (device)
    source: Any  # what the user passed
    framework: str  # "numpy", "torch", "cupy", "fastsgemm", ... (root module of its type)
    producer_stream: int | None = None  # stream to wait on before reading (CAI 'stream')
    keep_alive: list = field(default_factory=list)  # DLPack holders, released after the work is done


def framework_of(obj) -> str:
    return type(obj).__module__.split(".")[0]


def describe(obj) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__


def _dtype_error(name, obj, dtype_text):
    hint = ".float()" if framework_of(obj) == "torch" else ".astype(np.float32)"
    return TypeError(
        f"{name} has dtype {dtype_text}; fastsgemm computes in float32 and never casts silently: "
        f"pass {name}{hint}"
    )


def _check_2d(name, shape):
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got {len(shape)}-D with shape {tuple(shape)}")


def _host_operand(name, array, source, writable) -> Operand:
    if array.dtype != np.float32:
        raise _dtype_error(name, source, array.dtype)
    _check_2d(name, array.shape)
    if writable and not array.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if not array.flags.aligned:
        if writable:
            raise ValueError(f"{name} is not aligned to 4 bytes; pass an aligned array")
        array = array.copy()
    return Operand(name, HOST, array.shape, array, source, framework_of(source))


def _cai_operand(name, obj, writable) -> Operand:
    cai = obj.__cuda_array_interface__
    shape = tuple(cai["shape"])
    typestr = cai["typestr"]
    if np.dtype(typestr) != np.float32 or typestr[0] == ">":
        raise _dtype_error(name, obj, f"{np.dtype(typestr)} (typestr '{typestr}')")
    _check_2d(name, shape)
    if cai.get("mask") is not None:
        raise ValueError(f"{name} has a mask; masked arrays are not supported")
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise ValueError(f"{name} is read-only")
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides = (shape[1] * 4, 4)
    if any(s % 4 for s in strides):
        raise ValueError(f"{name} has strides {tuple(strides)} bytes, not whole float32 elements")
    core = (int(ptr), shape[0], shape[1], strides[0] // 4, strides[1] // 4)
    op = Operand(name, CUDA, shape, core, obj, framework_of(obj))
    stream = cai.get("stream")
    if stream == 0:
        raise ValueError(f"{name}: __cuda_array_interface__ stream 0 is disallowed by the interface (v3)")
    op.producer_stream = stream
    return op


def _dlpack_operand(name, obj, writable, consumer_stream) -> Operand:
    device_type, device_id = obj.__dlpack_device__()
    if device_type == _DL_CPU:
        return _host_operand(name, np.from_dlpack(obj), obj, writable)
    if device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise TypeError(f"{name} lives on DLPack device type {device_type}; fastsgemm takes host or CUDA memory")
    # DLPack forbids stream 0 for CUDA; 1 is the legacy default stream, which 0 stands for in the runtime API.
    stream = 1 if consumer_stream in (None, 0) else consumer_stream
    if _capturing(stream):
        # The producer may free a DLPack tensor as soon as its deleter runs, and only a synchronize (which a capture
        # forbids) would tell when the GPU is done with it; __dlpack__ itself may enqueue a cross-stream wait.
        raise ValueError(
            f"{name} is a DLPack-only array, and a CUDA graph is being captured: DLPack operands cannot be used "
            f"inside a capture. Pass the framework's own array (a torch tensor, a CuPy array) or an object with "
            f"__cuda_array_interface__, or call outside the capture"
        )
    try:
        capsule = obj.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0's max_version keyword
        capsule = obj.__dlpack__(stream=stream)
    holder, ptr, shape, strides, _, _, dtype, readonly = _sgemm.dlpack_import(capsule)
    if dtype != (_DL_FLOAT, 32, 1):
        raise _dtype_error(name, obj, f"DLPack (code, bits, lanes) = {dtype}")
    _check_2d(name, shape)
    if writable and readonly:
        raise ValueError(f"{name} is read-only")
    core = (ptr, shape[0], shape[1], strides[0], strides[1])
    op = Operand(name, CUDA, tuple(shape), core, obj, framework_of(obj))
    op.keep_alive.append(holder)
    return op


def _capturing(stream) -> bool:
    """Whether a CUDA graph capture is under way that work on `stream`, or on torch's or CuPy's current stream
    (where the frameworks are imported), would join."""
    if _sgemm.stream_capturing(stream):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        return True
    cupy = sys.modules.get("cupy")
    return cupy is not None and cupy.cuda.get_current_stream().is_capturing()


def is_device_array(obj) -> bool:
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    if hasattr(obj, "__dlpack_device__") and not isinstance(obj, np.ndarray):
        try:
            return obj.__dlpack_device__()[0] in (_DL_CUDA, _DL_CUDA_MANAGED)
        except Exception:
            return False
    return False


def to_operand(name, obj, *, writable=False, consumer_stream=None) -> Operand:
    """Reads one argument; raises TypeError or ValueError with a message fit for users."""
    if isinstance(obj, np.ndarray):
        return _host_operand(name, obj, obj, writable)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_operand(name, obj, writable)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_operand(name, obj, writable, consumer_stream)
    try:
        memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{name} must be a float32 matrix (a NumPy array, a buffer, or a CUDA array such as a CuPy array or a "
            f"PyTorch CUDA tensor); got {describe(obj)}"
        ) from None
    return _host_operand(name, np.asarray(obj), obj, writable)


def working_stream(op: Operand) -> int:
    """The stream device work runs on: the caller's current stream in the framework that made A, else the
    stream A's producer named, else the legacy default stream."""
    source = op.source
    if op.framework == "torch" and "torch" in sys.modules:
        import torch

        return torch.cuda.current_stream(source.device).cuda_stream
    if op.framework == "cupy" and "cupy" in sys.modules:
        with source.device:
            import cupy

            return cupy.cuda.get_current_stream().ptr
    if op.producer_stream is not None:
        return op.producer_stream
    return 0


def empty_like_framework(template: Operand, shape):
    """An uninitialised float32 M x N result on A's side, in A's framework where fastsgemm can allocate in it."""
    if template.side == HOST:
        return np.empty(shape, dtype=np.float32)
    source = template.source
    if template.framework == "torch" and "torch" in sys.modules:
        import torch

        return torch.empty(shape, dtype=torch.float32, device=source.device)
    if template.framework == "cupy" and "cupy" in sys.modules:
        import cupy

        with source.device:
            return cupy.empty(shape, dtype=cupy.float32)
    from ._device_array import DeviceArray

    ptr = template.core[0]
    device = _sgemm.pointer_device(ptr) if ptr else _sgemm.current_device()
    return DeviceArray.empty(shape, device=device)
