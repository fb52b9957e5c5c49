"""Inputs that lie, checked on the host (these run in CI, without a GPU): outs whose elements overlap, masked
arrays, ndarray subclasses that also claim to be device arrays, malformed __cuda_array_interface__ dicts,
garbage stream handles and forged DLPack capsules. Each must give a TypeError or ValueError that names what is
wrong, and never a wrong answer or a crash. The device side (descriptions past their allocation, a lost
context) is tests/test_lying_device.py."""
import itertools
import warnings

import numpy as np
import pytest

import fastsgemm
from fastsgemm import _operands, _sgemm
from conftest import random_matrix
from lying import ForgedTensor, Interface, cai

as_strided = np.lib.stride_tricks.as_strided


def reference(A, B):
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)


# ---- out whose elements overlap ----


def test_one_row_or_column_out_with_zero_stride_is_refused(rng):
    A, B = random_matrix(rng, 1, 3), random_matrix(rng, 3, 5)
    row = as_strided(np.zeros(1, np.float32), (1, 5), (20, 0), writeable=True)
    with pytest.raises(ValueError, match="out's elements overlap"):
        fastsgemm.sgemm(A, B, out=row, kernel="cpu")
    column = as_strided(np.zeros(1, np.float32), (5, 1), (0, 4), writeable=True)
    with pytest.raises(ValueError, match="out's elements overlap"):
        fastsgemm.sgemm(B.T.copy(), A.T.copy(), out=column, kernel="cpu")
    assert row[0, 0] == 0 and column[0, 0] == 0  # nothing was written
    # A single element with zero strides overlaps nothing.
    single = as_strided(np.zeros(1, np.float32), (1, 1), (0, 0), writeable=True)
    np.testing.assert_allclose(fastsgemm.sgemm(A, B[:, :1], out=single, kernel="cpu"), reference(A, B[:, :1]),
                               rtol=1e-5)


def _overlaps(shape, strides):
    """Brute force: whether two elements of a view share an offset."""
    offsets = [i * strides[0] + j * strides[1] for i in range(shape[0]) for j in range(shape[1])]
    return len(set(offsets)) != len(offsets)


def test_overlap_is_detected_exactly_for_every_small_view(rng):
    """Every shape up to 4 x 4 and every stride pair in -5..5 elements: refused exactly when two elements share
    memory (the brute-force answer), computed correctly otherwise."""
    A_full, B_full = random_matrix(rng, 4, 3), random_matrix(rng, 3, 4)
    refused = computed = 0
    for m, n, rs, cs in itertools.product(range(1, 5), range(1, 5), range(-5, 6), range(-5, 6)):
        A, B = A_full[:m], B_full[:, :n]
        span = (m - 1) * abs(rs) + (n - 1) * abs(cs) + 1
        start = (m - 1) * max(-rs, 0) + (n - 1) * max(-cs, 0)  # room for negative strides before the first element
        base = np.full(span + 2, -7.0, np.float32)
        out = as_strided(base[1 + start:], (m, n), (rs * 4, cs * 4), writeable=True)
        if _overlaps((m, n), (rs, cs)):
            with pytest.raises(ValueError, match="out's elements overlap"):
                fastsgemm.sgemm(A, B, out=out, kernel="cpu")
            assert (base == -7.0).all(), (m, n, rs, cs)
            refused += 1
        else:
            np.testing.assert_allclose(fastsgemm.sgemm(A, B, out=out, kernel="cpu"), reference(A, B), rtol=1e-5,
                                       atol=1e-6, err_msg=str((m, n, rs, cs)))
            assert base[0] == -7.0 and base[-1] == -7.0
            computed += 1
    assert refused > 500 and computed > 1000  # both sides of the rule were exercised (571 and 1365)


def test_overlapping_out_without_a_zero_stride_is_refused(rng):
    A, B = random_matrix(rng, 4, 3), random_matrix(rng, 3, 4)
    out = as_strided(np.zeros(16, np.float32), (4, 4), (4, 4), writeable=True)
    with pytest.raises(ValueError, match=r"out's elements overlap: shape \(4, 4\) with strides \(1, 1\)"):
        fastsgemm.sgemm(A, B, out=out, kernel="cpu")


# ---- masked arrays and ndarray subclasses ----


@pytest.mark.parametrize("which", ["A", "B", "C", "out"])
def test_masked_arrays_are_refused_on_the_host_path(rng, which):
    arrays = {"A": random_matrix(rng, 3, 4), "B": random_matrix(rng, 4, 5), "C": random_matrix(rng, 3, 5),
              "out": np.zeros((3, 5), np.float32)}
    arrays[which] = np.ma.masked_array(arrays[which], mask=np.eye(*arrays[which].shape, dtype=bool))
    with pytest.raises(ValueError, match=f"{which} is a masked array"):
        fastsgemm.sgemm(arrays["A"], arrays["B"], arrays["C"], beta=1.0, out=arrays["out"], kernel="cpu")


class _ClaimsDevice(np.ndarray):
    """An ndarray subclass that also claims to be a device array."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f4", "data": (self.ctypes.data, False), "version": 3,
                "strides": self.strides}


def test_an_ndarray_subclass_with_a_cuda_interface_is_host_memory_on_every_path(rng):
    A, B = random_matrix(rng, 3, 4).view(_ClaimsDevice), random_matrix(rng, 4, 5)
    assert not _operands.is_device_array(A)
    assert _operands.to_operand("A", A).side == _operands.HOST
    for kernel in ("cpu", "auto"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # auto without a GPU says it runs the cpu rung
            result = fastsgemm.sgemm(A, B, kernel=kernel)
        assert isinstance(result, np.ndarray)
        np.testing.assert_allclose(result, reference(np.asarray(A), B), rtol=1e-5, atol=1e-6)


# ---- malformed __cuda_array_interface__ ----

_GOOD = {"shape": (2, 2), "typestr": "<f4", "data": (1 << 20, False), "version": 3}

MALFORMED = [
    ("not a dict", [1, 2], TypeError, "must be a dict"),
    ("no shape", {k: v for k, v in _GOOD.items() if k != "shape"}, ValueError, "no 'shape' key"),
    ("no data", {k: v for k, v in _GOOD.items() if k != "data"}, ValueError, "no 'data' key"),
    ("no typestr", {k: v for k, v in _GOOD.items() if k != "typestr"}, ValueError, "no 'typestr' key"),
    ("no version", {k: v for k, v in _GOOD.items() if k != "version"}, ValueError, "no 'version' key"),
    ("version 99", {**_GOOD, "version": 99}, ValueError, "version 99"),
    ("version a string", {**_GOOD, "version": "3"}, ValueError, "version '3'"),
    ("shape None", {**_GOOD, "shape": None}, TypeError, r"\['shape'\] must be a tuple of integers"),
    ("shape of floats", {**_GOOD, "shape": (2.0, 2)}, TypeError, r"\['shape'\]"),
    ("negative shape", {**_GOOD, "shape": (2, -2)}, ValueError, "negative extent"),
    ("strides too short", {**_GOOD, "strides": (8,)}, ValueError, r"\['strides'\] has 1 entries for a 2-D"),
    ("strides not a tuple", {**_GOOD, "strides": 8}, TypeError, r"\['strides'\]"),
    ("data an int", {**_GOOD, "data": 1 << 20}, TypeError, r"\['data'\] must be a \(pointer"),
    ("data None", {**_GOOD, "data": None}, TypeError, r"\['data'\]"),
    ("data pointer a string", {**_GOOD, "data": ("0x100000", False)}, TypeError, r"\['data'\]"),
    ("negative pointer", {**_GOOD, "data": (-4, False)}, ValueError, "is not an address"),
    ("typestr not a string", {**_GOOD, "typestr": 4}, TypeError, r"\['typestr'\] must be a string"),
    ("typestr garbage", {**_GOOD, "typestr": "zz9"}, TypeError, "is not a type string"),
    ("float64", {**_GOOD, "typestr": "<f8"}, TypeError, "dtype float64"),
    ("stream 0", {**_GOOD, "stream": 0}, ValueError, "stream 0 is disallowed"),
    ("stream a string", {**_GOOD, "stream": "s"}, TypeError, "integer stream handle"),
    ("stream True", {**_GOOD, "stream": True}, TypeError, "integer stream handle"),
    ("stream odd", {**_GOOD, "stream": 12345}, ValueError, "not a CUDA stream handle"),
    ("stream in the first page", {**_GOOD, "stream": 64}, ValueError, "not a CUDA stream handle"),
    ("stream negative", {**_GOOD, "stream": -8}, ValueError, "not a CUDA stream handle"),
    ("stream past 64 bits", {**_GOOD, "stream": 1 << 70}, ValueError, "not a CUDA stream handle"),
    ("a mask", {**_GOOD, "mask": object()}, ValueError, "has a mask"),
]


@pytest.mark.parametrize("description, error, message", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_cuda_array_interface_gives_a_clean_error_naming_operand_and_key(description, error, message):
    with pytest.raises(error, match=message) as raised:
        _operands.to_operand("B", Interface(description))
    assert str(raised.value).startswith("B"), raised.value


def test_an_interface_property_that_raises_is_reported_as_the_operands():
    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise KeyError("shape")

    with pytest.raises(TypeError, match="A: reading __cuda_array_interface__ failed"):
        _operands.to_operand("A", Broken())


def test_well_formed_interfaces_are_read_as_before():
    op = _operands.to_operand("A", cai(1 << 20, (3, 5), (4, 12), stream=2, version=2))
    assert op.core == (1 << 20, 3, 5, 1, 3) and op.producer_stream == 2
    assert _operands.to_operand("A", cai(1 << 20, (3, 5))).core == (1 << 20, 3, 5, 5, 1)


@pytest.mark.parametrize("stream", [12345, -1, "0", 2.0, 1 << 64, 4096 + 4])
def test_sgemm_raw_refuses_garbage_stream_handles_before_any_cuda_call(stream):
    with pytest.raises((TypeError, ValueError), match="stream"):
        fastsgemm.sgemm_raw(2, 2, 2, 1.0, 1 << 20, 2, 1 << 20, 2, 0.0, 1 << 20, 2, stream=stream, kernel="naive")


def test_a_misaligned_device_pointer_is_named_in_hex():
    kernel = (fastsgemm.KERNELS.index("naive"), -1)
    with pytest.raises(ValueError, match=r"A: device pointer 0x100002 is not 4-byte aligned"):
        _sgemm.gemm(kernel, (0x100002, 2, 2, 2, 1), (1 << 20, 2, 2, 2, 1), None, (1 << 21, 2, 2, 2, 1), 1.0, 0.0, 0)


# ---- forged DLPack capsules ----

DLPACK_LIES = [
    ("negative ndim", dict(shape=(2, 2), ndim=-1), "ndim is -1"),
    ("huge ndim", dict(shape=(2, 2), ndim=1 << 30), "ndim is 1073741824"),
    ("NULL shape", dict(shape=(2, 2), null_shape=True), "shape is NULL for a 2-D tensor"),
    ("negative extent", dict(shape=(2, -3)), r"shape\[1\] is -3"),
    ("NULL data", dict(shape=(2, 2), ptr=None), "data is NULL for a tensor of 4 elements"),
    ("elements past 64 bits", dict(shape=(1 << 40, 1 << 40)), "shape has more elements than 64 bits"),
    ("byte_offset past the address space", dict(shape=(2, 2), byte_offset=(1 << 64) - 8), "byte_offset"),
]


@pytest.mark.parametrize("fields, message", [d[1:] for d in DLPACK_LIES], ids=[d[0] for d in DLPACK_LIES])
@pytest.mark.parametrize("deleter_raises", [False, True], ids=["deleter", "deleter that raises"])
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the raising deleter's report
def test_forged_dlpack_fields_are_checked_before_use(fields, message, deleter_raises):
    fields = dict(fields)
    ptr = fields.pop("ptr", 1 << 20)
    tensor = ForgedTensor(ptr, deleter_raises=deleter_raises, **fields)
    # The producer's deleter runs (once) while the error is being raised; it must neither replace the error nor
    # swallow it, even when it raises itself (that is reported as unraisable, not raised).
    with pytest.raises(ValueError, match=f"DLPack tensor: {message}"):
        _sgemm.dlpack_import(tensor.capsule())
    assert tensor.deleted == 1


def test_a_well_formed_forged_capsule_is_read_and_released_once():
    tensor = ForgedTensor(1 << 20, (3, 4), (1, 3))
    holder, ptr, shape, strides, device_type, _, dtype, readonly = _sgemm.dlpack_import(tensor.capsule())
    assert (ptr, shape, strides, device_type, dtype, readonly) == (1 << 20, (3, 4), (1, 3), 2, (2, 32, 1), False)
    assert tensor.deleted == 0
    del holder
    assert tensor.deleted == 1
