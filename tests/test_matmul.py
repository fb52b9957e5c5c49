"""fastsgemm.matmul against numpy.matmul: ranks, broadcast stacks, strides, errors; on the GPU every rung on
batches (broadcast, transposed, odd, long K, more products than one grid holds) and the frameworks' results."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastsgemm
from conftest import assert_close, rung_params, tolerance


def check(result, a, b, tol, what):
    """result == a @ b (numpy.matmul's shape; the values against float64) within tol."""
    expected = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    got = np.asarray(result, np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, numpy.matmul gives {expected.shape}"
    if expected.size:
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
