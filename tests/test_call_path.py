"""The per-call path: the C fast path (csrc/fast_call.c) for torch tensors, CuPy arrays, DeviceArrays and NumPy
arrays, the general path behind it, the streams each waits on, and CUDA graph capture."""
import functools
import sys
import textwrap

import numpy as np
import pytest

import fastsgemm
from fastsgemm import _sgemm
from fastsgemm._device_array import record_writer
from conftest import assert_close, launched_kernels, random_matrix, reference, run_at_once, tolerance

FAST_KERNELS = ["auto", "cublas", "warptile", "tf32x3", "tf32x3_mma", "naive"]


def fast_call(A, B, C=None, *, alpha=1.0, beta=0.0, out=None, kernel="auto"):
    """sgemm through the fast path alone: fails the test if it declines the call."""
    result = _sgemm.sgemm_fast(A, B, C, out, alpha, beta, kernel)
    assert result is not NotImplemented, "the fast path declined a call it should take"
    return result


def test_fast_path_takes_numpy_arrays(rng):
    A, B, C = random_matrix(rng, 33, 17), random_matrix(rng, 17, 9), random_matrix(rng, 33, 9)
    result = fast_call(A, B, kernel="cpu")
    assert type(result) is np.ndarray and result.shape == (33, 9)
    assert_close(result, reference(A, B), what="fast path, numpy")
    out = np.full((33, 9), np.nan, np.float32)
    assert fast_call(A, B, C, alpha=0.5, beta=2, out=out, kernel="cpu") is out
    assert_close(out, reference(A, B, C, 0.5, 2.0), what="fast path, numpy, out= and C")
    assert_close(fast_call(A.T.copy().T, B, kernel="cpu"), reference(A, B), what="fast path, numpy, column-major A")


def test_fast_path_declines_what_the_general_path_must_explain(rng):
    """Everything unusual is handed back untouched (NotImplemented), and sgemm then raises or runs it."""
    A, B = random_matrix(rng, 4, 3), random_matrix(rng, 3, 5)
    out = np.zeros((4, 5), np.float32)
    overlapping = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (4, 5), (4, 4), writeable=True)
    declined = [
        (A.astype(np.float64), B, None, None, 1.0, 0.0, "cpu"),  # dtype
        (A, B.T, None, None, 1.0, 0.0, "cpu"),  # shapes
        (A, B, None, None, 1.0, 0.0, "bogus"),  # kernel name
        (A, B, None, out[:, :4], 1.0, 0.0, "cpu"),  # out shape
        (A, B, None, None, 1.0, 2.0, "cpu"),  # beta without C
        (A, B, None, None, np.float32(1.0), 0.0, "cpu"),  # a NumPy scalar: the general path converts it
        (np.ma.masked_array(A), B, None, None, 1.0, 0.0, "cpu"),  # an ndarray subclass
        (A[None], B, None, None, 1.0, 0.0, "cpu"),  # 3-D
    ]
    for args in declined:
        assert _sgemm.sgemm_fast(*args) is NotImplemented, args[-1]
    readonly = np.zeros((4, 5), np.float32)
    readonly.setflags(write=False)
    assert _sgemm.sgemm_fast(A, B, None, readonly, 1.0, 0.0, "cpu") is NotImplemented
    with pytest.raises(ValueError, match="read-only"):
        fastsgemm.sgemm(A, B, out=readonly, kernel="cpu")
    # An out whose elements overlap is refused by the check both paths share, before anything is written.
    for call in (lambda: _sgemm.sgemm_fast(A, B, None, overlapping, 1.0, 0.0, "cpu"),
                 lambda: fastsgemm.sgemm(A, B, out=overlapping, kernel="cpu")):
        with pytest.raises(ValueError, match="out's elements overlap"):
            call()
    assert not overlapping.any()


# ---- device operands ----


def device_kinds():
    kinds = ["fastsgemm"]
    for name in ("torch", "cupy"):
        try:
            __import__(name)
            kinds.append(name)
        except ImportError:
            pass
    return kinds


def to_kind(kind, x):
    if kind == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(x)).cuda()
    if kind == "cupy":
        import cupy

        return cupy.asarray(x)
    return fastsgemm.to_device(np.ascontiguousarray(x))


def to_host(x):
    if isinstance(x, fastsgemm.DeviceArray):
        return x.numpy()
    if type(x).__module__.startswith("torch"):
        return x.cpu().numpy()
    import cupy

    return cupy.asnumpy(x)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", FAST_KERNELS)
@pytest.mark.parametrize("kind", ["fastsgemm", "torch", "cupy"])
def test_fast_path_takes_device_arrays(kind, kernel, rng):
    if kind not in device_kinds():
        pytest.skip(f"{kind} is not installed")
    m, n, k = 70, 45, 33
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    a, b, c = to_kind(kind, A), to_kind(kind, B), to_kind(kind, C)
    result = fast_call(a, b, kernel=kernel)
    assert type(result) is type(a)
    assert_close(to_host(result), reference(A, B), tol=tolerance(kernel), what=f"{kind} {kernel}")
    out = to_kind(kind, np.full((m, n), np.nan, np.float32))
    assert fast_call(a, b, c, alpha=-1.5, beta=0.5, out=out, kernel=kernel) is out
    assert_close(to_host(out), reference(A, B, C, -1.5, 0.5), tol=tolerance(kernel), what=f"{kind} {kernel} out=, C")
    if kind != "fastsgemm":  # a transposed view reaches the kernel without a copy
        assert_close(to_host(fast_call(b.T, a.T, kernel=kernel)), reference(B.T, A.T), tol=tolerance(kernel),
                     what=f"{kind} {kernel} transposed views")


@pytest.mark.gpu
def test_fast_path_declines_mixed_and_foreign_operands(rng):
    torch = pytest.importorskip("torch")
    A, B = random_matrix(rng, 8, 6), random_matrix(rng, 6, 4)
    a = torch.from_numpy(A).cuda()
    assert _sgemm.sgemm_fast(a, fastsgemm.to_device(B), None, None, 1.0, 0.0, "auto") is NotImplemented
    assert _sgemm.sgemm_fast(a, torch.from_numpy(B), None, None, 1.0, 0.0, "auto") is NotImplemented  # CPU tensor
    assert _sgemm.sgemm_fast(a.double(), a.double().T, None, None, 1.0, 0.0, "auto") is NotImplemented
    # ...and the general path still computes the mixed call.
    assert_close(fastsgemm.sgemm(a, fastsgemm.to_device(B)).cpu().numpy(), reference(A, B), what="torch A, DeviceArray B")


class ForeignInterface:
    """A producer that is none of the fast path's kinds: __cuda_array_interface__ v3 with its own stream."""

    def __init__(self, array, stream):
        self.array, self.stream = array, stream

    @property
    def __cuda_array_interface__(self):
        interface = dict(self.array.__cuda_array_interface__)
        interface["stream"] = self.stream
        return interface


@pytest.mark.gpu
def test_producer_stream_that_differs_from_the_working_stream(rng):
    """B is still being written on a producer stream when the call is made: the call waits for it, on the GPU.
    Both the fast path (DeviceArray operands) and the general path (a foreign __cuda_array_interface__ naming its
    stream) must order the GEMM after the producer's work."""
    torch = pytest.importorskip("torch")
    n = 2048
    X = random_matrix(rng, n, n)
    A = random_matrix(rng, n, n)
    for route in ("fast", "general"):
        producer = torch.cuda.Stream()
        x = fastsgemm.to_device(X)
        b = fastsgemm.DeviceArray.empty((n, n))
        # A slow product on the producer stream writes B (naive at 2048^3 takes tens of milliseconds).
        with torch.cuda.stream(producer):
            fastsgemm.sgemm_raw(n, n, n, 1.0, x.ptr, n, x.ptr, n, 0.0, b.ptr, n, kernel="naive",
                                stream=producer.cuda_stream)
        record_writer(b, producer.cuda_stream)  # B's last writer, as a DeviceArray records it
        a = fastsgemm.to_device(A)  # its last writer: the legacy default stream
        if route == "fast":
            result = fast_call(a, b, kernel="cublas")
        else:
            result = fastsgemm.sgemm(a, ForeignInterface(b, producer.cuda_stream), kernel="cublas")
        expected = reference(A, reference(X, X).astype(np.float32))
        assert_close(result.numpy(), expected, tol=1e-4, what=f"{route} path after a producer stream")


# ---- one rule for both paths: the overlap test, the working stream, the result ----

@pytest.mark.parametrize("x, y, overlap", [
    ((1000, (3, 4), (4, 1)), (1000 + 4 * 11, (1,), (1,)), True),  # y is x's last element
    ((1000, (3, 4), (4, 1)), (1000 + 4 * 12, (1,), (1,)), False),  # y is just past it
    ((1000, (3, 4), (-4, 1)), (1000 - 4 * 8, (1,), (1,)), True),  # a negative row stride reaches back 8 elements
    ((1000, (3, 4), (-4, 1)), (1000 - 4 * 9, (1,), (1,)), False),
    ((1000, (3, 0), (4, 1)), (1000, (2,), (1,)), False),  # an empty view names no memory
    ((1000, (2, 3, 4), (0, 4, 1)), (1000 + 4 * 11, (2,), (1,)), True),  # a broadcast dimension (stride 0)
    ((1000, (2, 3, 4), (0, 4, 1)), (1000 + 4 * 12, (2,), (1,)), False),
    ((4096, (2 ** 62, 3), (2 ** 62, 1)), (0, (1,), (1,)), True),  # a span past 64 bits counts as everything
    ((16, (10,), (-1,)), (0, (4,), (1,)), True),  # addresses that would wrap below 0: everything too
    ((2 ** 64 - 8, (4,), (1,)), (0, (1,), (1,)), True),  # and past the top of the address space
    ((1000, (), ()), (1000, (), ()), True),  # rank 0: one element
])
def test_views_overlap_is_the_span_test(x, y, overlap):
    """csrc/operands.c's one overlap test, as fastsgemm.matmul's Python asks it: byte spans, any rank and sign."""
    assert _sgemm.views_overlap(*x, *y) is overlap
    assert _sgemm.views_overlap(*y, *x) is overlap


def test_views_overlap_refuses_what_is_not_a_view():
    with pytest.raises(TypeError):
        _sgemm.views_overlap(0, (2, 3), (3,), 0, (1,), (1,))
    with pytest.raises(ValueError, match="negative extent"):
        _sgemm.views_overlap(0, (-2,), (1,), 0, (1,), (1,))
    with pytest.raises(OverflowError):
        _sgemm.views_overlap(-1, (2,), (1,), 0, (1,), (1,))


def test_a_host_stack_whose_out_overlaps_an_input_is_computed_aside(rng):
    """A matrix broadcast over a stack, lying in the stack's out: product 1 writes it, product 2 reads it. Run one
    by one into out, product 2 would read product 1's result; the overlap test sends the stack to a temporary."""
    buffer = rng.standard_normal((3, 4, 4)).astype(np.float32)
    A = buffer[1]  # every product's A, and product 1's out
    B = rng.standard_normal((3, 4, 4)).astype(np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    fastsgemm.matmul(A, B, out=buffer, kernel="cpu")
    assert_close(buffer, want, what="out over a broadcast A on the host")


def test_general_path_result_on_the_host_is_numpy(rng):
    from fastsgemm import _operands
    A = random_matrix(rng, 5, 3)
    op = _operands.to_operand("A", memoryview(A))
    result = _operands.empty_like_framework(op, (5, 7))
    assert type(result) is np.ndarray and result.shape == (5, 7) and result.dtype == np.float32


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["torch", "cupy", "fastsgemm", "foreign"])
def test_both_paths_make_the_same_result_on_the_same_stream(kind, rng):
    """The general path's working stream and result come from the C the fast path uses: a result of the operands'
    framework (a DeviceArray for a foreign interface), on their device, and the stream the fast path would take."""
    from fastsgemm import _operands
    A = random_matrix(rng, 6, 5)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        a, want_type = torch.from_numpy(A).cuda(), torch.Tensor
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            op = _operands.to_operand("A", a)
            assert _operands.working_stream(op) == stream.cuda_stream
    elif kind == "cupy":
        cupy = pytest.importorskip("cupy")
        a, want_type = cupy.asarray(A), cupy.ndarray
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            assert _operands.working_stream(_operands.to_operand("A", a)) == stream.ptr
    else:
        torch = pytest.importorskip("torch")  # for a stream that is not the legacy default one
        side_stream = torch.cuda.Stream()
        writer = side_stream.cuda_stream
        a = fastsgemm.to_device(A)
        torch.cuda.synchronize()
        record_writer(a, writer)  # its last writer, which the work must follow
        want_type = fastsgemm.DeviceArray
        if kind == "foreign":
            a = ForeignInterface(a, writer)
        assert _operands.working_stream(_operands.to_operand("A", a)) == writer
    op = _operands.to_operand("A", a)
    result = _operands.empty_like_framework(op, (6, 9))
    assert isinstance(result, want_type) and tuple(result.shape) == (6, 9)
    assert str(result.dtype).endswith("float32")
    assert _sgemm.pointer_device(_operands.to_operand("out", result).core[0]) == _operands.operand_device(op)
    if want_type is fastsgemm.DeviceArray:
        with pytest.raises(TypeError, match="3-D result"):
            _operands.empty_like_framework(op, (2, 6, 9))
    else:
        assert tuple(_operands.empty_like_framework(op, (2, 6, 9)).shape) == (2, 6, 9)


def test_the_fast_readers_decline_what_is_not_theirs():
    """read_device, the fast path's readers as the general path asks them, takes only torch tensors, CuPy arrays and
    DeviceArrays: anything else is the interfaces' business (None, nothing raised)."""
    for obj in (np.zeros((2, 3), np.float32), memoryview(np.zeros(3, np.float32)), [1.0], None, "A"):
        assert _sgemm.read_device(obj, 3) is None


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["torch", "cupy", "fastsgemm"])
def test_the_general_path_reads_the_fast_kinds_as_the_interface_does(kind, rng):
    """The general path reads torch tensors, CuPy arrays and DeviceArrays with the fast path's C readers; what it
    reads (address, shape, strides in elements, stream) is what __cuda_array_interface__ says, for matrices in
    each layout and, for matmul, stacks of them. What those readers decline (a 1-D or 4-D array, a float64 one)
    still reads, or is refused, through the interface."""
    from fastsgemm import _operands
    X = rng.standard_normal((3, 5, 4)).astype(np.float32)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        make = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
        views = [make(X[0]), make(X[0]).T, make(X), make(X).transpose(1, 2), make(X)[:, 1:, ::2]]
        wrong = make(X[0]).double()
    elif kind == "cupy":
        cupy = pytest.importorskip("cupy")
        make = cupy.asarray
        views = [make(X[0]), make(X[0]).T, make(X), make(X).transpose(0, 2, 1), make(X)[:, 1:, ::2]]
        wrong = make(X[0]).astype(cupy.float64)
    else:
        views = [fastsgemm.to_device(X[0])]
        wrong = None
    for view in views:
        matrix = len(view.shape) == 2
        op = _operands.to_operand("A", view, matrix=matrix)
        assert _sgemm.read_device(view, 2 if matrix else 3) is not None, "the fast reader declined"
        cai = view.__cuda_array_interface__
        strides = cai["strides"] or tuple(4 * s for s in _operands.c_contiguous_strides(cai["shape"]))
        assert (op.ptr, tuple(op.shape), tuple(op.strides)) == (cai["data"][0], tuple(cai["shape"]),
                                                             tuple(s // 4 for s in strides))
        if kind != "torch":  # torch's interface (v2) names no stream; CuPy's and a DeviceArray's do
            assert op.producer_stream == cai["stream"], "the general path would not wait for the producer's stream"
    if wrong is not None:
        assert _sgemm.read_device(wrong, 2) is None
        with pytest.raises(TypeError, match="float32"):
            _operands.to_operand("A", wrong)
        flat = views[2].reshape(-1)
        assert _sgemm.read_device(flat, 3) is None
        assert tuple(_operands.to_operand("A", flat, matrix=False).shape) == (60,)


# ---- CUDA graphs ----

GRAPH_KERNELS = ["auto", "cublas", "warptile", "tf32x3", "tf32x3_mma", "tf32", "tf32x3_inplace"]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", GRAPH_KERNELS)
def test_torch_graph_capture_and_replay(kernel, rng):
    torch = pytest.importorskip("torch")
    m, n, k = 256, 192, 320
    a = torch.from_numpy(random_matrix(rng, m, k)).cuda()
    b = torch.from_numpy(random_matrix(rng, k, n)).cuda()
    out = torch.full((m, n), float("nan"), device="cuda")
    fastsgemm.sgemm(a, b, out=out, kernel=kernel)  # warm: handles and pools exist before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
    for _ in range(2):  # fresh inputs, copied into the captured buffers, then replayed
        A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
        a.copy_(torch.from_numpy(A))
        b.copy_(torch.from_numpy(B))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out.cpu().numpy(), reference(A, B), tol=tolerance(kernel), what=f"{kernel} graph replay")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "cublas", "tf32x3"])
def test_cupy_stream_capture_and_replay(kernel, rng):
    cupy = pytest.importorskip("cupy")
    m, n, k = 200, 96, 128
    a, b = cupy.asarray(random_matrix(rng, m, k)), cupy.asarray(random_matrix(rng, k, n))
    out = cupy.full((m, n), cupy.nan, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
        stream.synchronize()
        stream.begin_capture()
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
        graph = stream.end_capture()
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    a.set(A)
    b.set(B)
    out.fill(cupy.nan)
    graph.launch(stream)
    stream.synchronize()
    assert_close(cupy.asnumpy(out), reference(A, B), tol=tolerance(kernel), what=f"{kernel} CuPy graph replay")


COLD_CAPTURE_KERNELS = ("cublas", "tf32x3", "auto")
COLD_CAPTURE = """
    import numpy as np, torch, fastsgemm
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (300, 200)).astype(np.float32)
    B = rng.uniform(-1, 1, (200, 100)).astype(np.float32)
    a, b = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    out = torch.full((300, 100), float("nan"), device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fastsgemm.sgemm(a, b, out=out, kernel=KERNEL)
    graph.replay()
    torch.cuda.synchronize()
    error = np.linalg.norm(out.cpu().numpy() - A.astype(np.float64) @ B) / np.linalg.norm(A.astype(np.float64) @ B)
    print("ERROR", error)
"""


@functools.cache
def cold_captures():
    """Each kernel's fresh process, all at once (each mostly imports torch)."""
    return run_at_once({kernel: [sys.executable, "-c", f"KERNEL = {kernel!r}" + textwrap.dedent(COLD_CAPTURE)]
                        for kernel in COLD_CAPTURE_KERNELS})


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", COLD_CAPTURE_KERNELS)
def test_cold_capture(kernel):
    """The call inside the capture is the process's first use of cuBLAS and of the workspace pool."""
    pytest.importorskip("torch")
    done = cold_captures()[kernel]
    assert done.returncode == 0 and "ERROR" in done.stdout, done.stderr[-3000:]
    error = float(done.stdout.split("ERROR")[1])
    assert error < tolerance(kernel), error


@pytest.mark.gpu
def test_dlpack_input_inside_a_capture_is_refused_before_the_stream_is_touched(rng):
    torch = pytest.importorskip("torch")
    from test_device_arrays import DLPackOnly

    A, B = random_matrix(rng, 64, 32), random_matrix(rng, 32, 16)
    a, b = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    out = torch.full((64, 16), float("nan"), device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="DLPack.*captur"):
        with torch.cuda.graph(graph):
            fastsgemm.sgemm(DLPackOnly(a), DLPackOnly(b), out=out, kernel="cublas")
    # The capture ended cleanly (no invalidated stream), and the process's CUDA state is intact.
    assert_close(fastsgemm.sgemm(a, b, kernel="cublas").cpu().numpy(), reference(A, B), what="after the refused capture")


# ---- C broadcast along D's slower dimension (a bias), read in place ----
BROADCAST_SHAPE = (70, 52, 260)  # K long enough for the thin configuration's slices and their sum


def broadcast_c(values, m, n, order):
    """A NumPy vector broadcast to m x n along D's slower dimension: along the rows (a row stride of zero) for a
    row-major D ("C"), along the columns for a column-major one ("F")."""
    return np.broadcast_to(values, (m, n)) if order == "C" else np.broadcast_to(values[:, None], (m, n))


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_broadcast_c_on_the_host_gives_the_dense_cs_bits(order, rng):
    m, n, k = BROADCAST_SHAPE
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    C = broadcast_c(rng.standard_normal(n if order == "C" else m).astype(np.float32), m, n, order)
    assert 0 in C.strides  # the class is as named

    def run(c):
        out = np.full((m, n), np.nan, np.float32, order=order)
        return fastsgemm.sgemm(A, B, c, alpha=0.5, beta=-1.25, out=out, kernel="cpu")

    got = run(C)
    assert np.array_equal(got, run(np.array(C, order=order)))
    assert_close(got, reference(A, B, C, 0.5, -1.25), what="a broadcast C")


BROADCAST_KERNELS = ["auto", "cublas", "naive", "vectorized", "warptile", "tf32x3", "tf32x3_mma:thin",
                     "tf32x3_inplace", "tf32x3_regs:direct", "ozaki"]


@pytest.mark.gpu
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "offset"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("kernel", BROADCAST_KERNELS)
def test_a_broadcast_c_on_the_gpu_is_read_in_place(kernel, order, aligned, rng):
    """A torch vector expanded along D's slower dimension as C, its first element 16-byte aligned or one float on
    (the vector loads' fallback): every kernel reads it where it lies (ldc = 0; no copy kernel runs but cuBLAS's own
    copy of C into D), and the result is the dense C's, bit for bit."""
    torch = pytest.importorskip("torch")
    m, n, k = BROADCAST_SHAPE
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    a, b = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    length = n if order == "C" else m
    values = torch.from_numpy(rng.standard_normal(length + 1).astype(np.float32)).cuda()
    vector = values[:length] if aligned else values[1:]
    c = vector[None, :].expand(m, n) if order == "C" else vector[:, None].expand(m, n)
    assert 0 in c.stride()  # the class is as named

    def run(c):
        out = torch.full((m, n) if order == "C" else (n, m), float("nan"), device="cuda")
        out = out if order == "C" else out.T
        fastsgemm.sgemm(a, b, c, alpha=0.5, beta=-1.25, out=out, kernel=kernel)
        return out

    # The dense C lies at the same alignment as the vector: a kernel takes its 128-bit epilogue or its scalar one by
    # C's alignment, and the two may round alpha * acc + beta * c differently (which product the FMA takes).
    dense = torch.empty(m * n + 1, device="cuda")
    dense = (dense[:m * n] if aligned else dense[1:]).view((m, n) if order == "C" else (n, m))
    dense.copy_(c if order == "C" else c.T)
    got = run(c)
    assert torch.equal(got, run(dense if order == "C" else dense.T))
    assert_close(got.cpu().numpy(), reference(A, B, c.cpu().numpy(), 0.5, -1.25), tolerance(kernel),
                 what=f"{kernel}, a broadcast C")
    names = launched_kernels(lambda: run(c))
    copies = [name for name in names if "copy_matrix" in name]
    ran = fastsgemm.auto_kernel(m, n, k) if kernel == "auto" else kernel
    assert (len(copies) == 1) if ran == "cublas" else not copies, f"{kernel} ({ran}): launched {names}"
