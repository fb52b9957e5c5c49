"""fastsgemm.matmul against numpy.matmul: ranks, broadcast stacks, strides, errors; on the GPU every rung on
batches (broadcast, transposed, odd, long K, more products than one grid holds) and the frameworks' results."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastsgemm
from conftest import assert_close, rung_params, tolerance


def check(result, a, b, tol, what):
    """result == a @ b (numpy.matmul's shape; the values against float64) within tol, relative to the result's
    norm; where the sums cancel (a short dot product of mixed signs can come out near 0) relative to the norm of
    |a| @ |b| / sqrt(K) instead, the size FP32 rounding works at (equal to the result's norm on random data)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    expected = np.matmul(a64, b64)
    got = np.asarray(result, np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, numpy.matmul gives {expected.shape}"
    if expected.size:
        k = a64.shape[-1]
        rounding_scale = np.linalg.norm(np.matmul(np.abs(a64), np.abs(b64))) / np.sqrt(max(k, 1))
        result_norm = np.linalg.norm(expected)
        tol = tol * max(1.0, rounding_scale / result_norm) if result_norm > 0 else tol
        as_matrix = (1, -1) if expected.ndim < 2 else (-1, expected.shape[-1])  # assert_close reports (row, col)
        assert_close(got.reshape(as_matrix), expected.reshape(as_matrix), tol, what)


# ---- shapes, as numpy.matmul has them (host arrays, the cpu rung: runs without a GPU) ----

@st.composite
def matmul_case(draw):
    """Two operands of ranks 1-4 whose stacks broadcast, each maybe transposed in its last two dimensions or
    taken every other element along a stack dimension (strides no copy would make)."""
    m, k, n = (draw(st.integers(0, 9)) for _ in range(3))  # 0: empty results, and zeros for k = 0
    stack = draw(st.lists(st.integers(0, 4), max_size=2))
    rank_a, rank_b = draw(st.integers(1, 2 + len(stack))), draw(st.integers(1, 2 + len(stack)))

    def operand(rank, core):
        lead = [draw(st.sampled_from([1, s])) for s in stack][len(stack) - (rank - 2):] if rank > 2 else []
        return tuple(lead) + core

    shape_a = (k,) if rank_a == 1 else operand(rank_a, (m, k))
    shape_b = (k,) if rank_b == 1 else operand(rank_b, (k, n))
    return shape_a, shape_b, draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 2**31))


def make(shape, transposed, seed):
    rng = np.random.default_rng(seed)
    if transposed and len(shape) >= 2:
        base = rng.standard_normal(shape[:-2] + shape[-2:][::-1], dtype=np.float32)
        return np.swapaxes(base, -1, -2)
    if len(shape) >= 3:  # every other matrix of a stack twice as long: a stack stride no dense array has
        base = rng.standard_normal((shape[0] * 2,) + shape[1:], dtype=np.float32)
        return base[::2]
    return rng.standard_normal(shape, dtype=np.float32)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matmul_case())
def test_host_matmul_matches_numpy(case):
    shape_a, shape_b, t_a, t_b, seed = case
    a, b = make(shape_a, t_a, seed), make(shape_b, t_b, seed + 1)
    result = fastsgemm.matmul(a, b, kernel="cpu")
    assert isinstance(result, (np.ndarray, np.float32))
    check(result, a, b, tolerance("cpu"), f"{a.shape} @ {b.shape}")


def test_one_dimensional_operands_give_numpys_shapes():
    v, w = np.arange(3, dtype=np.float32), np.arange(3, dtype=np.float32) + 1
    assert isinstance(fastsgemm.matmul(v, w, kernel="cpu"), np.float32)  # a scalar, as numpy.matmul gives
    assert fastsgemm.matmul(v, w, kernel="cpu") == np.float32(v @ w)
    M = np.ones((2, 4, 3), np.float32)
    assert fastsgemm.matmul(M, v, kernel="cpu").shape == (2, 4)
    assert fastsgemm.matmul(v, np.ones((2, 3, 5), np.float32), kernel="cpu").shape == (2, 5)


def test_an_out_over_the_operands_gets_the_product_of_the_operands_as_they_were(rng):
    base = rng.standard_normal((4, 3, 3), dtype=np.float32)
    b = rng.standard_normal((3, 3), dtype=np.float32)
    expected = np.matmul(base[:3].astype(np.float64), b)  # before out overwrites the stack it reads
    fastsgemm.matmul(base[:3], b, out=base[1:], kernel="cpu")  # product 0's result lands on product 1's A
    assert_close(base[1:].reshape(-1, 3), expected.reshape(-1, 3), tolerance("cpu"), "out over A")


def test_an_out_that_is_not_an_ndarray_is_returned_itself():
    out = memoryview(bytearray(16)).cast("B").cast("f", shape=[2, 2])
    eye = np.eye(2, dtype=np.float32)
    assert fastsgemm.matmul(eye, 2 * eye, out=out, kernel="cpu") is out
    np.testing.assert_array_equal(np.asarray(out), 2 * eye)


def test_out_receives_the_result_and_is_returned():
    a, b = np.ones((3, 2, 4), np.float32), np.full((4, 5), 2, np.float32)
    out = np.full((3, 2, 5), np.nan, np.float32)
    assert fastsgemm.matmul(a, b, out=out, kernel="cpu") is out
    np.testing.assert_array_equal(out, np.full((3, 2, 5), 8, np.float32))


@pytest.mark.parametrize("shapes, message", [
    (((2, 3), (4, 5)), "(2, 3) (A) and (4, 5) (B) not aligned"),
    (((2, 2, 3), (3, 3, 4)), "do not broadcast"),
    (((), (3,)), "A is a scalar"),
    (((3,), ()), "B is a scalar"),
])
def test_shapes_numpy_refuses_raise_value_error_naming_them(shapes, message):
    a, b = (np.ones(s, np.float32) for s in shapes)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fastsgemm.matmul(a, b, kernel="cpu")
    with pytest.raises(ValueError):
        np.matmul(a, b)


def test_other_dtypes_raise_type_error_and_out_of_the_wrong_shape_value_error():
    with pytest.raises(TypeError, match="float64"):
        fastsgemm.matmul(np.ones((2, 2)), np.ones((2, 2), np.float32), kernel="cpu")
    with pytest.raises(ValueError, match=r"out has shape \(2, 3\).*needs \(2, 2\)"):
        fastsgemm.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), out=np.empty((2, 3), np.float32),
                         kernel="cpu")


# ---- on the GPU ----

BATCHES = [  # (A shape, B shape, A transposed, B transposed)
    ((5, 33, 17), (5, 17, 29), False, False),      # odd sizes
    ((6, 64, 48), (48, 40), True, False),          # B broadcast (stride 0), A column-major matrices
    ((3, 1, 40, 24), (4, 24, 56), False, True),    # both broadcast across two stack dimensions
    ((2, 3, 36), (36,), False, False),             # 1-D B
]


def to_torch(x):
    """x on the GPU as a torch tensor with x's layout of each matrix (row- or column-major)."""
    import torch

    if x.ndim < 2 or not np.swapaxes(x, -1, -2).flags.c_contiguous:
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()
    return torch.from_numpy(np.ascontiguousarray(np.swapaxes(x, -1, -2))).cuda().transpose(-1, -2)


@pytest.mark.parametrize("kernel", rung_params(device="cuda"))
@pytest.mark.parametrize("case", range(len(BATCHES)), ids=[f"{a}@{b}" for a, b, _, _ in BATCHES])
def test_every_rung_takes_batches(kernel, case, rng):
    torch = pytest.importorskip("torch")
    shape_a, shape_b, t_a, t_b = BATCHES[case]
    a = make(shape_a, t_a, int(rng.integers(2**31)))
    b = make(shape_b, t_b, int(rng.integers(2**31)))
    ta, tb = to_torch(a), to_torch(b)
    expected_shape = np.matmul(a, b).shape
    out = torch.full(expected_shape, float("nan"), device="cuda")  # poisoned: every element must be written
    result = fastsgemm.matmul(ta, tb, out=out, kernel=kernel)
    assert result is out
    check(result.cpu().numpy(), a, b, tolerance(kernel), f"{kernel} {a.shape} @ {b.shape}")
    fresh = fastsgemm.matmul(ta, tb, kernel=kernel)
    assert isinstance(fresh, torch.Tensor) and fresh.device == ta.device
    check(fresh.cpu().numpy(), a, b, tolerance(kernel), f"{kernel} {a.shape} @ {b.shape}, new result")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "cublas", "tf32x3", "warptile", "naive"])
def test_long_k_stacks_and_stacks_of_70000_products(kernel, rng):
    pytest.importorskip("torch")
    a = rng.standard_normal((3, 40, 9000), dtype=np.float32)  # K past 4096: split-K inside a batch
    b = rng.standard_normal((3, 9000, 24), dtype=np.float32)
    check(fastsgemm.matmul(to_torch(a), to_torch(b), kernel=kernel).cpu().numpy(), a, b, tolerance(kernel),
          f"{kernel} long K")
    a = rng.standard_normal((70000, 2, 3), dtype=np.float32)  # one tall product here: B is shared
    b = rng.standard_normal((3, 2), dtype=np.float32)
    check(fastsgemm.matmul(to_torch(a), to_torch(b), kernel=kernel).cpu().numpy(), a, b, tolerance(kernel),
          f"{kernel} 70000 products")


BATCHED = [k for k in fastsgemm.kernels() if k.device == "cuda"]
BATCHED = [name for k in BATCHED for name, b in [(k.name, k.batched)] + [(f"{k.name}:{c.name}", c.batched)
                                                                         for c in k.configs] if b]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", BATCHED)
@pytest.mark.parametrize("layout", ["row", "A column-major, B shared", "out column-major"])
def test_a_batched_kernel_runs_a_stack_in_one_launch_as_its_products_one_by_one(kernel, layout, rng):
    """A stack that is no one matrix product runs as one launch on the kernels that take a batch (grid z,
    or cuBLAS's strided-batched call). The wgmma rungs' products are each bit for bit what the kernel gives
    that product alone (the same tiles, in the same order); cuBLAS's to FP32's accuracy. Poisoned outputs."""
    torch = pytest.importorskip("torch")
    s, m, n, k = 5, 130, 70, 100
    a = torch.randn(s, m, k, device="cuda")
    b = torch.randn(s, k, n, device="cuda")
    out = torch.full((s, m, n), float("nan"), device="cuda")
    if layout == "A column-major, B shared":
        a = torch.randn(s, k, m, device="cuda").transpose(1, 2)  # column-major A: no tall product to fold into
        b = torch.randn(k, n, device="cuda")
    if layout == "out column-major":
        out = torch.full((s, n, m), float("nan"), device="cuda").transpose(1, 2)
    assert fastsgemm.matmul(a, b, out=out, kernel=kernel) is out
    expected = torch.matmul(a.double(), b.double()).cpu().numpy()
    assert_close(out.cpu().numpy(), expected, tolerance(kernel), f"{kernel}, {layout}")
    if not kernel.startswith("cublas"):
        for p in range(s):
            one = torch.empty_strided(out[p].shape, out[p].stride(), device="cuda")  # the same layout of out
            fastsgemm.sgemm(a[p], b if b.dim() == 2 else b[p], out=one, kernel=kernel)
            assert torch.equal(out[p], one), f"{kernel}, {layout}: product {p} differs from the same product alone"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "tf32x3", "cublas"])
def test_a_stack_past_grid_z_runs_in_launches_of_65535(kernel, rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(70000, 2, 3, device="cuda")
    b = torch.randn(70000, 3, 2, device="cuda")  # a stack of B too: nothing folds, 70000 products on grid z
    result = fastsgemm.matmul(a, b, kernel=kernel)
    assert_close(result.cpu().numpy(), torch.matmul(a.double(), b.double()).cpu().numpy(), tolerance(kernel),
                 f"{kernel}, 70000 products")


@pytest.mark.gpu
def test_a_stack_whose_workspace_passes_the_pool_packs_in_k_panels(rng):
    """48 products of 1024 x 1024 x 4096 need 3 GiB of packed operands, more than the pool keeps (a 64th of
    the GPU's memory): the batch is packed and multiplied in K panels, each adding onto every product's D."""
    torch = pytest.importorskip("torch")
    a = torch.rand(48, 1024, 4096, device="cuda") * 2 - 1
    b = torch.rand(48, 4096, 1024, device="cuda") * 2 - 1
    out = torch.full((48, 1024, 1024), float("nan"), device="cuda")
    fastsgemm.matmul(a, b, out=out, kernel="tf32x3")
    expected = torch.matmul(a.double(), b.double())
    error = float(torch.linalg.norm(out.double() - expected) / torch.linalg.norm(expected))
    assert error <= tolerance("tf32x3"), error


@pytest.mark.gpu
def test_a_stack_folds_into_one_product_only_within_the_kernels_largest_m():
    """128 products of 65536 x 32 sharing B would be one 8388608-row product, past tile2d's largest M (its row
    tiles on grid y): they run as a stack instead, and correctly."""
    torch = pytest.importorskip("torch")
    a = torch.rand(128, 65536, 32, device="cuda") - 0.5
    b = torch.rand(32, 32, device="cuda") - 0.5
    assert 128 * 65536 > [k for k in fastsgemm.kernels() if k.name == "tile2d"][0].max_dim
    result = fastsgemm.matmul(a, b, kernel="tile2d")
    expected = torch.matmul(a.double(), b.double())
    error = float(torch.linalg.norm(result.double() - expected) / torch.linalg.norm(expected))
    assert error <= tolerance("tile2d"), error


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["tf32x3", "cublas", "warptile"])
def test_an_out_whose_products_share_elements_gets_them_in_order(kernel, rng):
    """An out stack whose matrices overlap (strides (2, 1, 2)): products run one by one, in order, so each shared
    element holds the last product's value, as a loop of numpy.matmul calls leaves it; never folded into one
    product that would race on them."""
    torch = pytest.importorskip("torch")
    a = rng.standard_normal((2, 2, 3), dtype=np.float32)
    b = rng.standard_normal((3, 2), dtype=np.float32)
    memory = torch.full((6,), float("nan"), device="cuda")
    out = memory.as_strided((2, 2, 2), (2, 1, 2))
    fastsgemm.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), out=out, kernel=kernel)
    expected = np.full(6, np.nan)
    view = np.lib.stride_tricks.as_strided(expected, (2, 2, 2), (16, 8, 16))
    for p in range(2):
        view[p] = a[p].astype(np.float64) @ b.astype(np.float64)
    assert_close(memory.cpu().numpy()[None, :], expected[None, :], tolerance(kernel), f"{kernel}, overlapping out")


@pytest.mark.gpu
def test_three_dimensional_torch_and_cupy_stacks_take_the_c_fast_path(rng, monkeypatch):
    """fastsgemm.matmul on 3-D torch tensors and CuPy arrays (with 2-D ones, broadcast) never reaches the
    Python reading of operands; an out over an operand, or a stack that does not broadcast, still does."""
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    import fastsgemm._matmul as matmul_module

    def refuse(*args, **kwargs):
        raise AssertionError("the general path was taken")

    cases = [((4, 20, 12), (4, 12, 9)), ((4, 20, 12), (12, 9)), ((20, 12), (4, 12, 9)), ((1, 20, 12), (3, 12, 9))]
    with monkeypatch.context() as patched:
        patched.setattr(matmul_module, "to_operand", refuse)
        for shape_a, shape_b in cases:
            a = rng.standard_normal(shape_a, dtype=np.float32)
            b = rng.standard_normal(shape_b, dtype=np.float32)
            for framework, to, back in [(torch, lambda x: torch.from_numpy(x).cuda(), lambda r: r.cpu().numpy()),
                                        (cupy, cupy.asarray, cupy.asnumpy)]:
                result = fastsgemm.matmul(to(a), to(b))
                assert isinstance(result, torch.Tensor if framework is torch else cupy.ndarray)
                check(back(result), a, b, tolerance("auto"), f"{framework.__name__} {shape_a} @ {shape_b}")
                out = to(np.full(np.matmul(a, b).shape, np.nan, np.float32))
                assert fastsgemm.matmul(to(a), to(b), out=out, kernel="tf32x3") is out
                check(back(out), a, b, tolerance("tf32x3"), f"{framework.__name__} {shape_a} @ {shape_b}, out")
    base = torch.randn(4, 6, 6, device="cuda")
    expected = np.matmul(base[:3].cpu().double().numpy(), base[:3].cpu().double().numpy())
    fastsgemm.matmul(base[:3], base[:3].clone(), out=base[1:])  # over A: computed aside by the general path
    assert_close(base[1:].cpu().numpy().reshape(-1, 6), expected.reshape(-1, 6), tolerance("auto"), "out over A")
    with pytest.raises(ValueError, match="do not broadcast"):
        fastsgemm.matmul(torch.randn(3, 4, 5, device="cuda"), torch.randn(2, 5, 4, device="cuda"))


@pytest.mark.gpu
def test_a_cupy_stack_that_claims_memory_past_its_allocation_is_refused(rng):
    cupy = pytest.importorskip("cupy")
    from cupy.lib.stride_tricks import as_strided

    memory = cupy.zeros(4 * 8 * 8, dtype=cupy.float32)
    # Its second matrix 4 GiB on: past any allocation CuPy's pool made for 1 KiB (a pool's neighbouring arrays,
    # inside one allocation, are beyond what the driver can tell apart: docs/guarantees.md).
    lying = as_strided(memory, shape=(2, 8, 8), strides=(1 << 32, 8 * 4, 4))
    with pytest.raises(ValueError, match="claims memory it does not have"):
        fastsgemm.matmul(lying, cupy.ones((8, 8), dtype=cupy.float32) + cupy.eye(8, dtype=cupy.float32)[:, ::-1])


@pytest.mark.gpu
def test_stacks_that_fold_into_one_product_and_one_dimensional_operands(rng):
    torch = pytest.importorskip("torch")
    s, m, k, n = 5, 7, 12, 9
    # A shared, B's and out's matrices side by side in one k x (s * n) and m x (s * n): one wide product.
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, s * n, device="cuda").reshape(k, s, n).permute(1, 0, 2)
    out = torch.full((m, s * n), float("nan"), device="cuda").reshape(m, s, n).permute(1, 0, 2)
    assert fastsgemm.matmul(a, b, out=out) is out
    check(out.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy(), tolerance("auto"), "A shared, wide fold")
    # B shared, a C-contiguous stack of A: one tall product.
    a3 = torch.randn(s, m, k, device="cuda")
    check(fastsgemm.matmul(a3, b[0]).cpu().numpy(), a3.cpu().numpy(), b[0].cpu().numpy(), tolerance("auto"),
          "B shared, tall fold")
    v, w = torch.randn(k, device="cuda"), torch.randn(k, device="cuda")
    check(fastsgemm.matmul(v, b).cpu().numpy(), v.cpu().numpy(), b.cpu().numpy(), tolerance("auto"), "1-D A")
    product = fastsgemm.matmul(v, w)
    assert product.shape == () and isinstance(product, torch.Tensor)
    check(product.cpu().numpy(), v.cpu().numpy(), w.cpu().numpy(), tolerance("auto"), "1-D @ 1-D")


@pytest.mark.gpu
def test_a_device_out_over_the_operands_gets_the_product_of_the_operands_as_they_were(rng):
    torch = pytest.importorskip("torch")
    base = torch.randn(4, 6, 6, device="cuda")
    b = torch.randn(4, 6, 6, device="cuda")[:3]  # a stack of B: products run one by one
    expected = np.matmul(base[:3].cpu().double().numpy(), b.cpu().double().numpy())
    fastsgemm.matmul(base[:3], b, out=base[1:])
    assert_close(base[1:].cpu().numpy().reshape(-1, 6), expected.reshape(-1, 6), tolerance("auto"), "out over A")


@pytest.mark.gpu
def test_cupy_in_cupy_out_and_stacks_no_single_stride_describes(rng):
    cupy = pytest.importorskip("cupy")
    base = rng.standard_normal((4, 6, 16, 8), dtype=np.float32)
    a = base[:, ::2]  # stack strides (6 * 128, 2 * 128): no one step covers the 4 x 3 products
    b = rng.standard_normal((8, 12), dtype=np.float32)
    result = fastsgemm.matmul(cupy.asarray(base)[:, ::2], cupy.asarray(b))
    assert isinstance(result, cupy.ndarray)
    check(cupy.asnumpy(result), a, b, tolerance("auto"), "cupy, two-level stack")


@pytest.mark.gpu
def test_host_stacks_on_the_gpu_and_sides_that_differ(rng):
    a = rng.standard_normal((3, 20, 12), dtype=np.float32)
    b = rng.standard_normal((12, 7), dtype=np.float32)
    check(fastsgemm.matmul(a, b), a, b, tolerance("auto"), "NumPy stacks through the GPU")
    with pytest.raises(ValueError, match="same side"):
        fastsgemm.matmul(fastsgemm.to_device(a[0]), b)
