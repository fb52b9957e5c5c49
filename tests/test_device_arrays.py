"""Device arrays: CuPy, PyTorch, fastsgemm.DeviceArray and a DLPack-only
producer in and the same framework out, any strides, the caller's stream, the
raw-pointer entry, and the DLPack consumer/producer rules."""
import gc
import sys

import numpy as np
import pytest

import fastsgemm
from fastsgemm._device_array import device_buffer
from fastsgemm import _sgemm
from conftest import LAYOUTS, assert_close, in_layout, random_matrix, reference, rung_params, tolerance

CUDA_RUNGS = rung_params("cuda")


class DLPackOnly:
    """A producer that speaks only DLPack (as JAX does), wrapping a torch tensor."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def side(framework):
    """(to_device, to_host, result type) for a framework, skipping if it is not installed."""
    if framework == "cupy":
        cupy = pytest.importorskip("cupy")
        return cupy.asarray, cupy.asnumpy, cupy.ndarray
    torch = pytest.importorskip("torch")
    to_torch = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
    if framework == "torch":
        return to_torch, lambda t: t.cpu().numpy(), torch.Tensor
    if framework == "dlpack":
        return (lambda a: DLPackOnly(to_torch(a))), lambda t: t.tensor.cpu().numpy(), fastsgemm.DeviceArray
    if framework == "fastsgemm":
        return fastsgemm.to_device, lambda d: d.numpy(), fastsgemm.DeviceArray
    raise AssertionError(framework)


def host_of(x):
    if isinstance(x, fastsgemm.DeviceArray):
        return x.numpy()
    if isinstance(x, DLPackOnly):
        return x.tensor.cpu().numpy()
    if type(x).__module__.startswith("torch"):
        return x.cpu().numpy()
    import cupy

    return cupy.asnumpy(x)


FRAMEWORKS = ["cupy", "torch", "fastsgemm", "dlpack"]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (67, 45, 129), (300, 257, 31), (8, 5, 0), (0, 4, 3)])
def test_framework_in_framework_out(kernel, framework, m, n, k, rng):
    to_device, _, result_type = side(framework)
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    result = fastsgemm.sgemm(to_device(A), to_device(B), kernel=kernel)
    assert isinstance(result, result_type)
    assert tuple(result.shape) == (m, n)
    assert_close(host_of(result), reference(A, B), tol=tolerance(kernel), what=f"{kernel} {framework}")
    result = fastsgemm.sgemm(to_device(A), to_device(B), to_device(C), alpha=0.5, beta=2.0, kernel=kernel)
    assert_close(host_of(result), reference(A, B, C, 0.5, 2.0), tol=tolerance(kernel), what=f"{kernel} {framework} with C")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
def test_device_input_layouts(kernel, framework, layout_a, layout_b, rng):
    if framework == "torch" and "negative" in (layout_a, layout_b):
        pytest.skip("torch has no negative strides")
    to_device, to_host, _ = side(framework)
    m, n, k = 29, 35, 23
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    base_a, view_a = in_layout(A, layout_a, to_device)
    base_b, view_b = in_layout(B, layout_b, to_device)
    saved_a, saved_b = to_host(base_a), to_host(base_b)
    result = fastsgemm.sgemm(view_a, view_b, kernel=kernel)
    assert_close(host_of(result), reference(A, B), tol=tolerance(kernel), what=f"{kernel} {framework} A {layout_a} B {layout_b}")
    np.testing.assert_array_equal(to_host(base_a), saved_a)
    np.testing.assert_array_equal(to_host(base_b), saved_b)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("layout_out", LAYOUTS)
@pytest.mark.parametrize("layout_c", ["row", "col", "strided"])
def test_device_out_and_c_layouts(kernel, framework, layout_out, layout_c, rng):
    if framework == "torch" and layout_out == "negative":
        pytest.skip("torch has no negative strides")
    to_device, to_host, _ = side(framework)
    m, n, k = 26, 21, 19
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    base_c, view_c = in_layout(C, layout_c, to_device)
    saved_c = to_host(base_c)
    base_out, view_out = in_layout(np.full((m, n), np.nan, np.float32), layout_out, to_device)
    result = fastsgemm.sgemm(to_device(A), to_device(B), view_c, alpha=1.5, beta=-0.5, out=view_out, kernel=kernel)
    assert result is view_out
    assert_close(host_of(view_out), reference(A, B, C, 1.5, -0.5), tol=tolerance(kernel), what=f"{kernel} {framework} out {layout_out}")
    np.testing.assert_array_equal(to_host(base_c), saved_c)
    assert (~np.isnan(to_host(base_out))).sum() == m * n, "wrote outside the out view"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
@pytest.mark.parametrize("framework", ["cupy", "torch", "fastsgemm"])
def test_device_in_place_c(kernel, framework, rng):
    to_device, to_host, _ = side(framework)
    A, B, C = random_matrix(rng, 40, 30), random_matrix(rng, 30, 20), random_matrix(rng, 40, 20)
    c = to_device(C)
    assert fastsgemm.sgemm(to_device(A), to_device(B), c, alpha=2, beta=3, out=c, kernel=kernel) is c
    assert_close(host_of(c), reference(A, B, C, 2, 3), tol=tolerance(kernel), what=f"{kernel} {framework} out=C")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
def test_torch_current_stream(kernel, rng):
    torch = pytest.importorskip("torch")
    A, B = random_matrix(rng, 512, 384), random_matrix(rng, 384, 256)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        a, b = torch.from_numpy(A).cuda(non_blocking=True), torch.from_numpy(B).cuda(non_blocking=True)
        result = fastsgemm.sgemm(a, b, kernel=kernel)
        doubled = result * 2  # queued after sgemm on the same stream
    stream.synchronize()
    assert_close(doubled.cpu().numpy(), 2 * reference(A, B), tol=tolerance(kernel), what=f"{kernel} torch side stream")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
def test_cupy_current_stream(kernel, rng):
    cupy = pytest.importorskip("cupy")
    A, B = random_matrix(rng, 300, 200), random_matrix(rng, 200, 100)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        a, b = cupy.asarray(A), cupy.asarray(B)
        result = fastsgemm.sgemm(a, b, kernel=kernel) + 0
    stream.synchronize()
    assert_close(cupy.asnumpy(result), reference(A, B), tol=tolerance(kernel), what=f"{kernel} cupy side stream")


@pytest.mark.gpu
def test_device_errors(rng):
    torch = pytest.importorskip("torch")
    a = torch.ones((4, 3), device="cuda")
    b = torch.ones((3, 5), device="cuda")
    with pytest.raises(TypeError, match=r"float64.*\.float\(\)"):
        fastsgemm.sgemm(a.double(), b)
    with pytest.raises(ValueError, match="host"):
        fastsgemm.sgemm(a, np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="host arrays"):
        fastsgemm.sgemm(a, b, kernel="cpu")
    with pytest.raises(ValueError, match="not aligned"):
        fastsgemm.sgemm(a, a)
    with pytest.raises(ValueError, match="2-D"):
        fastsgemm.sgemm(a[0], b)


@pytest.mark.gpu
def test_out_of_memory_then_recovery(rng):
    """Asking for more than the device holds gives MemoryError, and the next call works."""
    torch = pytest.importorskip("torch")
    with pytest.raises(MemoryError):
        fastsgemm.DeviceArray.empty((200_000, 200_000))
    column = DLPackOnly(torch.ones((200_000, 1), device="cuda"))
    row = DLPackOnly(torch.ones((1, 200_000), device="cuda"))
    with pytest.raises(MemoryError):
        fastsgemm.sgemm(column, row, kernel="naive")  # a 160 GB DeviceArray result
    A, B = random_matrix(rng, 30, 20), random_matrix(rng, 20, 10)
    for kernel in ("naive", "cublas"):
        assert_close(fastsgemm.sgemm(A, B, kernel=kernel), reference(A, B), tol=tolerance(kernel), what=f"{kernel} after OOM")


# ---- the raw-pointer entry ----


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_sgemm_raw(kernel, trans_a, trans_b, rng):
    cupy = pytest.importorskip("cupy")
    m, n, k, pad = 37, 23, 41, 3
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    stored_a = A.T if trans_a else A
    stored_b = B.T if trans_b else B
    # Padded storage: leading dimension = stored columns + pad.
    a = cupy.zeros((stored_a.shape[0], stored_a.shape[1] + pad), cupy.float32)
    a[:, : stored_a.shape[1]] = cupy.asarray(stored_a)
    b = cupy.zeros((stored_b.shape[0], stored_b.shape[1] + pad), cupy.float32)
    b[:, : stored_b.shape[1]] = cupy.asarray(stored_b)
    c = cupy.asarray(C)
    stream = cupy.cuda.Stream(non_blocking=True)
    fastsgemm.sgemm_raw(m, n, k, 0.5, a.data.ptr, a.shape[1], b.data.ptr, b.shape[1], 2.0, c.data.ptr, n,
                        kernel=kernel, stream=stream.ptr, trans_a=trans_a, trans_b=trans_b)
    stream.synchronize()
    assert_close(cupy.asnumpy(c), reference(A, B, C, 0.5, 2.0), tol=tolerance(kernel), what=f"{kernel} raw ta={trans_a} tb={trans_b}")


@pytest.mark.gpu
def test_sgemm_raw_rejects_bad_arguments():
    cupy = pytest.importorskip("cupy")
    a = cupy.ones((4, 4), cupy.float32)
    host = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="lda"):
        fastsgemm.sgemm_raw(4, 4, 4, 1.0, a.data.ptr, 2, a.data.ptr, 4, 0.0, a.data.ptr, 4)
    with pytest.raises(ValueError, match="not CUDA device"):
        fastsgemm.sgemm_raw(4, 4, 4, 1.0, host.ctypes.data, 4, a.data.ptr, 4, 0.0, a.data.ptr, 4, kernel="naive")
    with pytest.raises(ValueError, match="host"):
        fastsgemm.sgemm_raw(4, 4, 4, 1.0, a.data.ptr, 4, a.data.ptr, 4, 0.0, a.data.ptr, 4, kernel="cpu")


# ---- DeviceArray and DLPack ----


@pytest.mark.gpu
def test_device_array_interchange(rng):
    X = random_matrix(rng, 17, 9)
    d = fastsgemm.to_device(X)
    assert d.shape == (17, 9) and d.dtype == np.float32
    np.testing.assert_array_equal(d.numpy(), X)
    cupy = pytest.importorskip("cupy")
    as_cupy = cupy.asarray(d)  # __cuda_array_interface__: no copy
    assert as_cupy.data.ptr == d.ptr
    torch = pytest.importorskip("torch")
    as_torch = torch.from_dlpack(d)  # DLPack: no copy
    assert as_torch.data_ptr() == d.ptr
    del d, as_cupy
    gc.collect()
    np.testing.assert_array_equal(as_torch.cpu().numpy(), X)  # the capsule kept the memory alive


def test_dlpack_capsule_rules():
    """Producer and consumer rules of DLPack, checked on the capsules themselves (no GPU needed):
    a capsule is consumed once, renamed 'used_...', and its deleter runs exactly once."""

    class Owner:
        pass

    for versioned in (False, True):
        owner = Owner()
        before = sys.getrefcount(owner)
        capsule = _sgemm.dlpack_export(owner, 4096, 3, 5, 5, 1, 2, 0, versioned)
        assert sys.getrefcount(owner) == before + 1
        holder, ptr, shape, strides, device_type, device_id, dtype, readonly = _sgemm.dlpack_import(capsule)
        assert (ptr, shape, strides, device_type, device_id, dtype, readonly) == (
            4096, (3, 5), (5, 1), 2, 0, (2, 32, 1), False)
        with pytest.raises(ValueError, match="unconsumed"):
            _sgemm.dlpack_import(capsule)  # renamed: cannot be consumed twice
        del capsule
        assert sys.getrefcount(owner) == before + 1  # the holder still owns the tensor
        del holder
        assert sys.getrefcount(owner) == before  # deleter ran, once
        unused = _sgemm.dlpack_export(owner, 4096, 3, 5, 5, 1, 2, 0, versioned)
        del unused  # never consumed: its own destructor calls the deleter
        assert sys.getrefcount(owner) == before


def test_dlpack_cpu_tensor_is_a_host_input(rng):
    torch = pytest.importorskip("torch")
    A, B = random_matrix(rng, 5, 4), random_matrix(rng, 4, 3)
    result = fastsgemm.sgemm(torch.from_numpy(A), torch.from_numpy(B), kernel="cpu")
    assert isinstance(result, np.ndarray)
    assert_close(result, reference(A, B), what="torch CPU tensors")


# ---- offsets past 2^31 elements: the 64-bit index instantiations ----


@pytest.fixture(scope="module")
def huge_buffer():
    """8.8 GB of device memory, so that operand views can have row strides of 1.1e9 elements."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.mem_get_info()[0] < 12 * 2**30:
        pytest.skip("needs 12 GiB of free device memory")
    buffer = torch.full((2_200_000_100,), float("nan"), device="cuda")
    yield buffer
    del buffer
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
def test_offsets_past_2_31(kernel, huge_buffer, rng):
    """Leading dimensions of 1.1e9 elements: offsets pass 2^31, so kernels must index in 64 bits."""
    stride = 1_100_000_000
    m, n, k = 3, 2, 3
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    torch = pytest.importorskip("torch")
    # Three disjoint views of one buffer; A reaches offset 2.2e9, past 2^31.
    a = huge_buffer.as_strided((m, k), (stride, 1), 0)  # row-major, lda = 1.1e9: elements i*stride + {0,1,2}
    b = huge_buffer.as_strided((k, n), (1, stride), 16)  # column-major, ldb = 1.1e9: j*stride + {16,17,18}
    out = huge_buffer.as_strided((m, n), (stride, 1), 64)  # row-major, ldd = 1.1e9: i*stride + {64,65}
    a.copy_(torch.from_numpy(A))
    b.copy_(torch.from_numpy(B))
    c = torch.from_numpy(C).cuda()
    result = fastsgemm.sgemm(a, b, c, alpha=1.5, beta=-0.5, out=out, kernel=kernel)
    assert result is out
    assert_close(out.cpu().numpy(), reference(A, B, C, 1.5, -0.5), tol=tolerance(kernel), what=f"{kernel} with 64-bit offsets")


# ---- DeviceArray results from the stream-ordered pool (csrc/_sgemm.c, "DeviceBuffer") ----


@pytest.mark.gpu
def test_device_array_results_come_from_the_pool_and_are_reused_correctly(rng):
    """A DeviceArray result on the default stream is pooled (no cudaMalloc, no synchronizing cudaFree per call).
    Chains of products whose intermediates are freed at once, so that later results reuse their memory in
    stream order, stay right: a free that overtook the work still reading the memory would show as wrong
    numbers."""
    n = 192
    A = (rng.uniform(-1, 1, (n, n)) / np.sqrt(n)).astype(np.float32)  # powers of A stay near 1 in size
    a = fastsgemm.to_device(A)
    assert not device_buffer(a).pooled, "to_device allocates with cudaMalloc"
    first = fastsgemm.sgemm(a, a, kernel="tile2d")
    assert device_buffer(first).pooled and not device_buffer(first).shared
    expected = [A.astype(np.float64)]
    for _ in range(6):
        expected.append(expected[-1] @ A.astype(np.float64))
    for trial in range(20):
        x = a
        for step in range(1, 7):
            x = fastsgemm.sgemm(x, a, kernel="naive" if step % 2 else "cublas")  # the previous x is freed here
            del_me = fastsgemm.sgemm(x, x, kernel="tile2d")  # a temporary freed at once, on the same stream
            del del_me
        assert device_buffer(x).pooled
        assert_close(x.numpy(), expected[6], tol=1e-4, what=f"chain of pooled results, trial {trial}")


@pytest.mark.gpu
def test_pooled_results_given_away_are_freed_after_a_device_synchronize(rng):
    """Where a pooled result's address leaves fastsgemm (the array interface, DLPack, .ptr), or fastsgemm itself
    reads it on a non-blocking stream, its memory is marked to be freed only after the device synchronizes."""
    A = random_matrix(rng, 64, 64)
    a = fastsgemm.to_device(A)
    for give_away in (lambda d: d.__cuda_array_interface__, lambda d: d.__dlpack__(), lambda d: d.ptr,
                      lambda d: d.__dlpack__(copy=True)):
        result = fastsgemm.sgemm(a, a)
        assert device_buffer(result).pooled and not device_buffer(result).shared
        give_away(result)
        assert device_buffer(result).shared
    cupy = pytest.importorskip("cupy")
    pooled = fastsgemm.sgemm(a, a)
    cupy.cuda.runtime.deviceSynchronize()  # `side` below does not wait for the legacy stream that wrote `pooled`
    side = cupy.cuda.Stream(non_blocking=True)
    on_side = fastsgemm.DeviceArray(device_buffer(pooled), pooled.shape, stream=side.ptr)  # the same memory, read on `side`
    product = fastsgemm.sgemm(on_side, a)
    side.synchronize()
    assert device_buffer(pooled).shared, "read on a non-blocking stream, the buffer must wait for the device when freed"
    assert not device_buffer(product).pooled, "a result on a non-blocking stream comes from cudaMalloc"
    assert_close(product.numpy(), reference(reference(A, A).astype(np.float32), A), tol=1e-4, what="on a side stream")


@pytest.mark.gpu
def test_pooled_results_read_in_a_capture_are_freed_after_a_device_synchronize(rng):
    """A read captured into a CUDA graph happens whenever, and on whatever stream, the graph is launched: a
    pooled buffer read in a capture (here on a blocking CuPy stream, which the legacy stream would otherwise
    order) is marked to wait for the device when freed, and the replay reads the right values."""
    cupy = pytest.importorskip("cupy")
    A = random_matrix(rng, 96, 96)
    a = fastsgemm.to_device(A)
    pooled = fastsgemm.sgemm(a, a)
    assert device_buffer(pooled).pooled
    cupy.cuda.runtime.deviceSynchronize()
    stream = cupy.cuda.Stream(non_blocking=False)
    operand = fastsgemm.DeviceArray(device_buffer(pooled), pooled.shape, stream=stream.ptr)
    out = fastsgemm.DeviceArray.empty((96, 96))
    fastsgemm.sgemm(operand, a, out=out, kernel="tile2d")  # warm, outside the capture
    stream.synchronize()
    assert not device_buffer(pooled).shared, "a blocking stream outside a capture is ordered with the legacy stream"
    stream.begin_capture()
    fastsgemm.sgemm(operand, a, out=out, kernel="tile2d")
    graph = stream.end_capture()
    assert device_buffer(pooled).shared
    graph.launch(stream)
    stream.synchronize()
    assert_close(out.numpy(), reference(reference(A, A).astype(np.float32), A), tol=1e-4, what="captured read")


class NotABuffer:
    nbytes_is_missing = True


@pytest.mark.parametrize("buffer", [NotABuffer(), np.zeros(16, np.float32), bytearray(64), None],
                         ids=["object", "ndarray", "bytearray", "None"])
def test_device_array_over_anything_but_its_buffer_is_a_type_error(buffer):
    """Only fastsgemm's own DeviceBuffer can back a DeviceArray: the C fast path reads its fields directly."""
    with pytest.raises(TypeError, match="DeviceBuffer.*fastsgemm.to_device"):
        fastsgemm.DeviceArray(buffer, (2, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2,), (1, 2, 3), "ab", "12", (2.0, 2), 5])
def test_device_array_shape_must_be_two_integers(shape):
    with pytest.raises(TypeError, match="two integers"):
        fastsgemm.DeviceArray(_sgemm.DeviceBuffer(64, 0), shape)


# ---- the C interface of a DeviceArray (no GPU: a DeviceBuffer of 0 bytes allocates nothing) ----

def test_device_array_state_lives_in_its_c_base():
    """The fast path reads a DeviceArray's buffer, shape and stream from its C base's struct, not from Python
    attributes: the class derives from _sgemm.DeviceMatrix and adds no slots of its own."""
    assert issubclass(fastsgemm.DeviceArray, _sgemm.DeviceMatrix)
    assert fastsgemm.DeviceArray.__slots__ == ()
    buffer = _sgemm.DeviceBuffer(0, 0)
    array = fastsgemm.DeviceArray(buffer, (0, 5))
    assert array.shape == (0, 5) and array._shape == (0, 5)
    assert array._buffer is buffer and device_buffer(array) is buffer
    assert array._stream is None
    array._stream = 7
    assert array._stream == 7
    array._stream = None
    assert array._stream is None
    import weakref
    ref = weakref.ref(array)
    assert ref() is array
    del array
    gc.collect()
    assert ref() is None


def test_device_array_buffer_and_shape_are_set_once_and_checked():
    buffer = _sgemm.DeviceBuffer(0, 0)
    array = fastsgemm.DeviceArray(buffer, (3, 0))
    for name, value in [("_buffer", _sgemm.DeviceBuffer(0, 0)), ("_shape", (1, 1))]:
        with pytest.raises(AttributeError):
            setattr(array, name, value)
    with pytest.raises(AttributeError):
        del array._stream
    # _bind, the one way to set them, checks what __init__ checks
    with pytest.raises(TypeError, match="DeviceBuffer"):
        array._bind(object(), 0, 0)
    with pytest.raises(ValueError, match="does not fit"):
        array._bind(buffer, 1, 1)
    with pytest.raises(ValueError, match="does not fit"):
        array._bind(buffer, -1, 0)
    with pytest.raises(TypeError):
        array._bind(buffer, 0)
    assert array._shape == (3, 0) and array._buffer is buffer  # a refused _bind changes nothing
    unbound = _sgemm.DeviceMatrix()
    with pytest.raises(AttributeError, match="no memory"):
        unbound._buffer
    assert unbound._shape == (0, 0)


def test_fast_path_takes_only_a_device_matrix_class():
    with pytest.raises(TypeError, match="DeviceMatrix"):
        _sgemm.register_fast_path(np.ndarray, np.empty, np.dtype(np.float32), object, lambda *a: None)


def test_device_array_stream_is_a_handle_or_none():
    """_stream is what the fast path reads as a CUDA stream handle: an int, or None. Anything else is refused, so
    that no object graph (a chain, a cycle) hangs from a matrix."""
    array = fastsgemm.DeviceArray(_sgemm.DeviceBuffer(0, 0), (0, 0))
    array._stream = 12345
    assert array._stream == 12345
    for bad in [object(), 1.5, "7", array]:
        with pytest.raises(TypeError, match="stream handle"):
            array._stream = bad
    assert array._stream == 12345
    with pytest.raises(TypeError, match="stream handle"):
        fastsgemm.DeviceArray(_sgemm.DeviceBuffer(0, 0), (0, 0), stream=object())


def test_fast_path_result_whose_bytes_wrap_is_refused():
    """An (2^31 x 0) by (0 x 2^31) product of empty DeviceArrays asks for a 2^31 x 2^31 result: 2^64 bytes, which
    wraps to 0 in 64 bits. The fast path counts without wrapping and refuses it, rather than make a result over
    an empty buffer for a kernel to write into."""
    a = fastsgemm.DeviceArray(_sgemm.DeviceBuffer(0, 0), (2**31, 0))
    b = fastsgemm.DeviceArray(_sgemm.DeviceBuffer(0, 0), (0, 2**31))
    with pytest.raises(ValueError, match="more bytes than can be addressed"):
        _sgemm.sgemm_fast(a, b, None, None, 1.0, 0.0, "cpu")
