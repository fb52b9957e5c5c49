"""Operands that describe memory however a test wants: a __cuda_array_interface__ built from a dict, and
DLPack capsules forged with ctypes (any ndim, shape, strides, pointer and deleter). The hostile-input tests
use them to hand fastsgemm descriptions that lie about the memory behind them."""
import ctypes

_DL_CUDA, _DL_CPU = 2, 1


class Interface:
    """An object whose __cuda_array_interface__ is exactly `cai` (anything, even not a dict)."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


def cai(ptr, shape, strides=None, *, readonly=False, stream=None, version=3, typestr="<f4"):
    """A well-formed interface dict (strides in bytes; None for C-contiguous)."""
    description = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, readonly), "version": version,
                   "strides": None if strides is None else tuple(strides)}
    if stream is not None:
        description["stream"] = stream
    return Interface(description)


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class ForgedTensor:
    """One unversioned DLPack tensor with the given fields; `deleted` counts its deleter's calls. The deleter is
    Python code, as a Python producer's would be. Keep the object alive while its capsule may be used."""

    def __init__(self, ptr, shape, strides=None, *, ndim=None, device_type=_DL_CUDA, device_id=0,
                 dtype=(2, 32, 1), null_shape=False, byte_offset=0, deleter_raises=False):
        self.deleted = 0
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)

        def delete(_self):
            self.deleted += 1
            if deleter_raises:
                raise RuntimeError("the producer's deleter failed")

        self._deleter = _Deleter(delete)
        self.managed = _Managed()
        t = self.managed.dl_tensor
        t.data = ptr
        t.device = _Device(device_type, device_id)
        t.ndim = len(shape) if ndim is None else ndim
        t.dtype = _DataType(*dtype)
        t.shape = None if null_shape else ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None if strides is None else ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = byte_offset
        self.managed.deleter = self._deleter

    def capsule(self):
        """A fresh "dltensor" capsule over the tensor. No destructor: the consumer (or the test) owns it."""
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)


class DLPackProducer:
    """An array that exports only DLPack (no __cuda_array_interface__), describing `tensor`."""

    def __init__(self, tensor: ForgedTensor, device=(_DL_CUDA, 0)):
        self.tensor = tensor
        self._device = device

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None, max_version=None):
        return self.tensor.capsule()
