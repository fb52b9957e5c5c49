"""DeviceArray: the small device matrix fastsgemm returns when the inputs came
from a framework it cannot allocate in (DLPack-only producers, Numba, raw
interface objects), and the simplest way to put a NumPy matrix on the GPU
without CuPy or PyTorch.

It exposes both interchange protocols, so CuPy, PyTorch, Numba and JAX take it
without a copy (``cupy.asarray(d)``, ``torch.from_dlpack(d)``), and
``.numpy()`` copies it back to the host.
"""
from __future__ import annotations

import operator

import numpy as np

from . import _sgemm

_DL_CUDA = 2


class DeviceArray(_sgemm.DeviceMatrix):
    """A row-major float32 matrix in CUDA device memory, owned by this object."""

    # The buffer, the shape and the last writer's stream live in the C base (_sgemm.DeviceMatrix), where the C
    # fast path reads them: _buffer and _shape (read-only, set by _bind) and _stream.
    __slots__ = ()

    def __init__(self, buffer, shape, stream=None):
        if not isinstance(buffer, _sgemm.DeviceBuffer):
            # The C fast path reads the buffer's fields directly: nothing else may stand in for one.
            raise TypeError(
                f"DeviceArray(buffer, shape) takes the device memory fastsgemm allocated (a DeviceBuffer), got "
                f"{type(buffer).__name__}; make one with fastsgemm.DeviceArray.empty(shape) or "
                f"fastsgemm.to_device(array), or pass a CuPy array, torch tensor or any __cuda_array_interface__ "
                f"or DLPack object to fastsgemm.sgemm directly"
            )
        try:
            rows, cols = (operator.index(n) for n in shape)
        except (TypeError, ValueError):
            raise TypeError(f"shape must be two integers (rows, cols), got {shape!r}") from None
        if rows < 0 or cols < 0 or rows * cols * 4 > buffer.nbytes:
            # The C fast path reads a DeviceArray's shape without further checks: it must never outgrow its buffer.
            raise ValueError(f"shape {(rows, cols)} needs {max(rows * cols * 4, 0)} bytes; the buffer holds {buffer.nbytes}")
        self._bind(buffer, rows, cols)  # checks the same again, in C
        self._stream = stream  # the stream of the last write, for consumers to wait on

    @classmethod
    def empty(cls, shape, *, device=None):
        """An uninitialised rows x cols float32 matrix on `device` (default: the current device)."""
        rows, cols = (int(n) for n in shape)
        if rows < 0 or cols < 0:
            raise ValueError(f"negative dimension in shape {tuple(shape)}")
        device = _sgemm.current_device() if device is None else int(device)
        return cls(_sgemm.DeviceBuffer(rows * cols * 4, device), (rows, cols))

    @classmethod
    def from_numpy(cls, array, *, device=None):
        """A device copy of a 2-D float32 host array."""
        array = np.asarray(array)
        if array.dtype != np.float32:
            raise TypeError(f"expected float32 data, got {array.dtype}: pass array.astype(np.float32)")
        if array.ndim != 2:
            raise ValueError(f"expected a 2-D matrix, got shape {array.shape}")
        result = cls.empty(array.shape, device=device)
        _sgemm.copy(matrix_core(result), np.require(array, requirements="A"), None)
        return result

    # -- what it is --
    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return np.dtype(np.float32)

    @property
    def ndim(self):
        return 2

    @property
    def size(self):
        return self._shape[0] * self._shape[1]

    @property
    def device(self):
        """CUDA device ordinal."""
        return self._buffer.device

    @property
    def ptr(self):
        """The device address. Once it has been asked for, the memory is freed only after a device synchronize:
        fastsgemm cannot follow where the address goes."""
        self._buffer.share()
        return self._buffer.ptr

    def __repr__(self):
        return f"fastsgemm.DeviceArray(shape={self._shape}, dtype=float32, device=cuda:{self.device})"

    # -- to the host --
    def numpy(self):
        """A host copy, after the last write to this matrix has finished."""
        out = np.empty(self._shape, dtype=np.float32)
        _sgemm.copy(out, matrix_core(self), self._stream)
        return out

    # -- interchange --
    @property
    def __cuda_array_interface__(self):
        # 0 is the legacy default stream to the runtime but is disallowed in the interface, which spells it 1.
        stream = None if self._stream is None else (self._stream or 1)
        self._buffer.share()  # its consumer may read it on any stream, later
        return {
            "shape": self._shape,
            "typestr": "<f4",
            "data": (self._buffer.ptr, False),
            "version": 3,
            "strides": None,
            "stream": stream,
        }

    def __dlpack_device__(self):
        return (_DL_CUDA, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray lives on {self.__dlpack_device__()}, cannot export to {dl_device}")
        if copy:
            self._buffer.share()  # read on self._stream, which may be one the free cannot follow
            source, self_or_copy = self, DeviceArray.empty(self._shape, device=self.device)
            _sgemm.copy(matrix_core(self_or_copy), matrix_core(source), self._stream)
            self_or_copy._stream = self._stream
        else:
            self_or_copy = self
        if stream is not None and stream != -1 and self._stream is not None:
            # The consumer will read on `stream`: make it wait for our last write.
            _sgemm.stream_wait(stream, self._stream, self.device)
        versioned = max_version is not None and max_version[0] >= 1
        rows, cols = self._shape
        self_or_copy._buffer.share()  # its consumer may read it on any stream, later
        return _sgemm.dlpack_export(
            self_or_copy, self_or_copy._buffer.ptr, rows, cols, cols, 1, _DL_CUDA, self.device, versioned
        )


# What the rest of the package reads from a DeviceArray, named here so that no module reaches into its slots.

def matrix_core(array: DeviceArray) -> tuple:
    """(pointer, rows, cols, row stride, column stride): the matrix as _sgemm's gemm and copy take it."""
    rows, cols = array._shape
    return (array._buffer.ptr, rows, cols, cols, 1)


def device_buffer(array: DeviceArray):
    """The _sgemm.DeviceBuffer that holds the matrix (whether it is pooled, whether it is shared)."""
    return array._buffer


def record_writer(array: DeviceArray, stream) -> None:
    """Notes `stream` as the last writer of `array`: its consumers wait on that stream before they read."""
    array._stream = stream


def to_device(array, *, device=None) -> DeviceArray:
    """Copies a 2-D float32 host array to the GPU as a DeviceArray."""
    return DeviceArray.from_numpy(array, device=device)
