"""Turning what users pass as A, B, C and out into what the C core takes.

Host matrices are anything NumPy can view without copying (ndarray, buffer
protocol, DLPack CPU tensors) and reach the core as float32 ndarrays. Device
matrices come through ``__cuda_array_interface__`` (v3) or DLPack and reach the
core as ``(pointer, rows, cols, row_stride, col_stride)`` tuples, strides in
elements. Nothing here copies device memory; a host array is copied only when
it is misaligned.
"""
from __future__ import annotations

import numbers
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
    # Device operands of any rank (read with matrix=False): the address and the strides in elements.
    ptr: int | None = None
    strides: tuple | None = None


def framework_of(obj) -> str:
    return type(obj).__module__.split(".")[0]


def records_gradient(*operands) -> bool:
    """Whether autograd would record a product of these operands: one of them is a torch tensor that requires
    grad, and torch's grad mode is on. torch is looked up, never imported: a torch tensor means it is loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in operands)


# The differentiable product of torch tensors, (a, b, kernel) -> tensor with a gradient: fastsgemm.torch registers
# it when it is imported. The core never imports that integration (it imports the core), so the package's modules
# form no cycle; a product autograd would record, asked for before the integration is loaded, is refused.
_differentiable = None


def register_differentiable(matmul) -> None:
    """Called by fastsgemm.torch at its import: `matmul(a, b, kernel=...)` records the product's gradient."""
    global _differentiable
    _differentiable = matmul


def differentiable_product(caller: str, a, b, kernel):
    """a @ b through the registered differentiable operator; RuntimeError naming the import where none is."""
    if _differentiable is None:
        raise RuntimeError(f"{caller}: an operand requires grad, and the product's gradient needs fastsgemm's "
                           "autograd support: `import fastsgemm.torch` first (then this call records the "
                           "gradient), or pass .detach()ed tensors")
    return _differentiable(a, b, kernel=kernel)


def untracked(obj):
    """A torch tensor that requires grad, detached (a view, no copy), for a product autograd will not record (grad
    mode off): torch refuses to export such a tensor through DLPack or __cuda_array_interface__. Anything else as
    it is."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.requires_grad:
        return obj.detach()
    return obj


def torch_tensors(*objects) -> bool:
    """Whether every object is a torch tensor (torch looked up, never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and all(isinstance(x, torch.Tensor) for x in objects)


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


def _host_operand(name, array, source, writable, matrix=True) -> Operand:
    if isinstance(array, np.ma.MaskedArray):
        raise ValueError(
            f"{name} is a masked array; masks are not supported (a product would drop it): pass {name}.filled(0) "
            f"or {name}.data"
        )
    if array.dtype != np.float32:
        raise _dtype_error(name, source, array.dtype)
    if matrix:
        _check_2d(name, array.shape)
    if writable and not array.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if not array.flags.aligned:
        if writable:
            raise ValueError(f"{name} is not aligned to 4 bytes; pass an aligned array")
        array = array.copy()
    return Operand(name, HOST, array.shape, array, source, framework_of(source))


# The interface versions whose meaning this reader knows (v3 added 'stream'; earlier ones simply lack it).
_CAI_VERSIONS = (0, 1, 2, 3)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_tuple(name, key, value, length=None):
    """value as a tuple of ints, or TypeError/ValueError naming the operand and the key."""
    if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
        raise TypeError(f"{name}: __cuda_array_interface__[{key!r}] must be a tuple of integers, got {value!r}")
    if length is not None and len(value) != length:
        raise ValueError(
            f"{name}: __cuda_array_interface__[{key!r}] has {len(value)} entries for a {length}-D shape: {value!r}"
        )
    return tuple(int(v) for v in value)


def check_stream_handle(what, stream):
    """A CUDA stream handle given as an integer: 1 and 2 (the interfaces' legacy and per-thread default streams),
    0 where the caller allows it, else a pointer to the runtime's stream object. A pointer cannot be verified
    without dereferencing it, which is what crashes on garbage; what can be checked cheaply is checked: that it
    is an integer, fits in a pointer, is not in the first page (no allocation lives there) and is 8-byte aligned
    (the runtime's objects are heap-allocated)."""
    if not _is_int(stream):
        raise TypeError(f"{what} must be an integer stream handle, got {describe(stream)}")
    stream = int(stream)
    if stream in (0, 1, 2):
        return stream
    if stream < 0 or stream >= 1 << 64 or stream < 4096 or stream % 8:
        raise ValueError(f"{what} {stream:#x} is not a CUDA stream handle (0, 1, 2 or a pointer to a stream)")
    return stream


def _read_cai(name, obj) -> dict:
    """obj's __cuda_array_interface__, every key checked before use."""
    try:
        cai = obj.__cuda_array_interface__
    except Exception as error:
        raise TypeError(f"{name}: reading __cuda_array_interface__ failed: {error!r}") from error
    if not isinstance(cai, dict):
        raise TypeError(f"{name}: __cuda_array_interface__ must be a dict, got {describe(cai)}")
    for key in ("shape", "typestr", "data", "version"):
        if key not in cai:
            raise ValueError(f"{name}: __cuda_array_interface__ has no {key!r} key")
    version = cai["version"]
    if not _is_int(version) or version not in _CAI_VERSIONS:
        raise ValueError(
            f"{name}: __cuda_array_interface__ version {version!r} is not one fastsgemm reads "
            f"({', '.join(map(str, _CAI_VERSIONS))})"
        )
    shape = _int_tuple(name, "shape", cai["shape"])
    if any(extent < 0 for extent in shape):
        raise ValueError(f"{name}: __cuda_array_interface__['shape'] has a negative extent: {shape}")
    if not isinstance(cai["typestr"], str):
        raise TypeError(f"{name}: __cuda_array_interface__['typestr'] must be a string, got {cai['typestr']!r}")
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2 or not _is_int(data[0]) or not isinstance(data[1], bool):
        raise TypeError(
            f"{name}: __cuda_array_interface__['data'] must be a (pointer: int, read_only: bool) pair, got {data!r}"
        )
    if not 0 <= data[0] < 1 << 64:
        raise ValueError(f"{name}: __cuda_array_interface__['data'] pointer {data[0]} is not an address")
    strides = cai.get("strides")
    if strides is not None:
        strides = _int_tuple(name, "strides", strides, len(shape))
    stream = cai.get("stream")
    if stream is not None:
        if stream == 0 and _is_int(stream):
            raise ValueError(f"{name}: __cuda_array_interface__ stream 0 is disallowed by the interface (v3)")
        stream = check_stream_handle(f"{name}: __cuda_array_interface__['stream']", stream)
    return {"shape": shape, "typestr": cai["typestr"], "data": (int(data[0]), data[1]), "strides": strides,
            "mask": cai.get("mask"), "stream": stream}


def c_contiguous_strides(shape) -> tuple:
    """Strides in elements of a C-contiguous array of this shape."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _device_operand(name, obj, shape, strides, ptr, matrix) -> Operand:
    """A device Operand from an interface's shape, strides (elements) and address; 2-D unless matrix is False."""
    if matrix:
        _check_2d(name, shape)
    core = (ptr, shape[0], shape[1], strides[0], strides[1]) if len(shape) == 2 else None
    return Operand(name, CUDA, tuple(shape), core, obj, framework_of(obj), ptr=ptr, strides=tuple(strides))


def _cai_operand(name, obj, writable, matrix=True) -> Operand:
    cai = _read_cai(name, obj)
    shape, typestr = cai["shape"], cai["typestr"]
    try:
        dtype = np.dtype(typestr)
    except TypeError:
        raise TypeError(f"{name}: __cuda_array_interface__['typestr'] {typestr!r} is not a type string") from None
    if dtype != np.float32 or typestr[0] == ">":
        raise _dtype_error(name, obj, f"{dtype} (typestr '{typestr}')")
    if matrix:
        _check_2d(name, shape)
    if cai["mask"] is not None:
        raise ValueError(f"{name} has a mask; masked arrays are not supported")
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise ValueError(f"{name} is read-only")
    strides = cai["strides"]
    if strides is None:  # C-contiguous
        strides = tuple(4 * s for s in c_contiguous_strides(shape))
    if any(s % 4 for s in strides):
        raise ValueError(f"{name} has strides {tuple(strides)} bytes, not whole float32 elements")
    # Whether shape and strides stay inside the memory behind ptr is checked in C, against the driver's record
    # of the allocation (csrc/allocation.c).
    op = _device_operand(name, obj, shape, [s // 4 for s in strides], ptr, matrix)
    op.producer_stream = cai["stream"]
    return op


def _dlpack_operand(name, obj, writable, consumer_stream, matrix=True) -> Operand:
    device_type, device_id = obj.__dlpack_device__()
    if device_type == _DL_CPU:
        return _host_operand(name, np.from_dlpack(obj), obj, writable, matrix)
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
    if matrix:
        _check_2d(name, shape)
    if writable and readonly:
        raise ValueError(f"{name} is read-only")
    op = _device_operand(name, obj, shape, strides, ptr, matrix)
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


def _claims_cai(obj) -> bool:
    """Whether obj offers __cuda_array_interface__; an attribute that raises counts (reading it reports why)."""
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:
        return True


def is_device_array(obj) -> bool:
    """Whether obj is device memory. An ndarray (any subclass) is host memory whatever else it claims: NumPy's
    data is host memory by definition. to_operand follows the same rule."""
    if isinstance(obj, np.ndarray):
        return False
    if _claims_cai(obj):
        return True
    if hasattr(obj, "__dlpack_device__") and not isinstance(obj, np.ndarray):
        try:
            return obj.__dlpack_device__()[0] in (_DL_CUDA, _DL_CUDA_MANAGED)
        except Exception:
            return False
    return False


def to_operand(name, obj, *, writable=False, consumer_stream=None, matrix=True) -> Operand:
    """Reads one argument; raises TypeError or ValueError with a message fit for users. matrix=False takes any
    rank (fastsgemm.matmul) and gives device operands' address and strides instead of a 2-D core.

    One reader for both call paths: NumPy arrays go to the C core's buffer reader; torch CUDA tensors, CuPy arrays
    and DeviceArrays to the fast path's own readers (csrc/fast_call.c, read_device), matrices and stacks of them;
    whatever those decline (another producer, another rank, a wrong dtype or layout, memory the allocation does
    not hold) through __cuda_array_interface__, DLPack or the buffer protocol below, which say what is wrong."""
    if isinstance(obj, np.ndarray):
        return _host_operand(name, obj, obj, writable, matrix)
    read = _sgemm.read_device(obj, 2 if matrix else 3)
    if read is not None:  # a torch tensor, CuPy array or DeviceArray, read as the fast path reads it
        ptr, shape, strides, _, stream = read
        op = _device_operand(name, obj, shape, strides, ptr, matrix)
        # The stream its producer names, as its interface gives it: a DeviceArray's last writer, CuPy's current
        # stream (0, the legacy default stream, spelled 1); torch's interface names none.
        op.producer_stream = None if stream is None else (stream or 1)
        return op
    if _claims_cai(obj):
        return _cai_operand(name, obj, writable, matrix)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_operand(name, obj, writable, consumer_stream, matrix)
    try:
        memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{name} must be a float32 matrix (a NumPy array, a buffer, or a CUDA array such as a CuPy array or a "
            f"PyTorch CUDA tensor); got {describe(obj)}"
        ) from None
    return _host_operand(name, np.asarray(obj), obj, writable, matrix)


def working_stream(op: Operand) -> int:
    """The stream device work runs on: the caller's current stream in the framework that made A, else the
    stream A's producer named, else the legacy default stream. The rules live in C (csrc/fast_call.c's
    working_stream), which the fast path follows too."""
    return _sgemm.stream_for(op.source, -1, op.producer_stream)  # C asks torch or CuPy for the array's device


def operand_device(op: Operand) -> int | None:
    """The CUDA device that holds a device operand's memory (the driver's record of its allocation); None for host
    operands and empty ones, whose pointer names no allocation."""
    if op.side != CUDA or not all(op.shape):
        return None
    ptr = op.ptr if op.ptr is not None else op.core[0]
    return _sgemm.pointer_device(ptr) if ptr else None


def empty_like_framework(template: Operand, shape):
    """An uninitialised float32 result of `shape` on A's side, in A's framework where fastsgemm can allocate in
    it, else a DeviceArray (matrices only: TypeError for other ranks). Made in C (csrc/fast_call.c's
    new_result_of_shape), as the fast path makes its results."""
    shape = tuple(int(extent) for extent in shape)
    if template.side == HOST:
        return _sgemm.result_like(template.source, shape, -1, None)
    device = operand_device(template)
    framework = _framework_array(template.source)
    if device is None:
        device = _framework_device(template.source) if framework else _sgemm.current_device()
    if not framework and len(shape) != 2:
        raise TypeError(f"a {len(shape)}-D result of {describe(template.source)} operands has no array type to come "
                        f"back as (fastsgemm.DeviceArray holds matrices); pass out=, or torch or CuPy arrays")
    return _sgemm.result_like(template.source, shape, device, None)


def _framework_array(obj) -> bool:
    """Whether obj is a torch tensor or a CuPy array (any subclass), as the C tells its kinds apart: its results
    are made in that framework. Looked up, never imported: such an object means the framework is loaded."""
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    return (torch is not None and isinstance(obj, torch.Tensor)) or (cupy is not None and isinstance(obj, cupy.ndarray))


def _framework_device(obj) -> int:
    """The GPU a torch tensor or CuPy array says it is on (an empty one names no allocation to ask the driver)."""
    torch = sys.modules.get("torch")
    return obj.get_device() if torch is not None and isinstance(obj, torch.Tensor) else obj.device.id
