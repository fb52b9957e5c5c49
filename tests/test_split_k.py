"""Split-K in one launch, on the GPU.

Past K = 4096 the ladder's rungs split K into slices (csrc/operands.c's
k_slices and launch_split_k): one launch of the rung computes every slice
(grid z, ladder.h's k_slice) into a workspace, and a second kernel sums the
slices in order with alpha, beta and C. These tests run every CUDA rung and
configuration of the registry (cuBLAS too, which never splits) on long-K
products, on device arrays (fastsgemm.DeviceArray, so neither CuPy nor torch
is needed), with outputs poisoned with NaN first, against float64 numpy:
  - row-major operands, up to 128 slices (128 x 128 x 65536);
  - row- and column-major operands, 16-byte aligned and not, through
    sgemm_raw's transpose flags and leading dimensions;
  - beta != 0 with C, in place (out=C), and a column-major output from host
    arrays (the transposed problem);
  - bit for bit: the split product equals the float32 sum, in order, of the
    rung's unsplit products over each slice's K range, as the per-slice
    launches computed it before: one launch changes nothing in the numbers.
"""
import numpy as np
import pytest

import fastsgemm
from conftest import assert_close, random_matrix, reference, rung_params, tolerance

pytestmark = pytest.mark.gpu

CUDA_KERNELS = rung_params("cuda")

# csrc/operands.c: split from K = 4097 into slices of about 512 (at most 128, workspace under 64 MiB), each
# a whole number of 32-deep k-tiles; for a kernel with a fill rule (the tensor-core rungs), no more slices than
# one wave of its blocks needs.
SPLIT_FROM_K, SPLIT_SLICE, MAX_SLICES, SLICE_MULTIPLE, WORKSPACE_BYTES = 4097, 512, 128, 32, 64 << 20


def fill_of(kernel):
    """The registry's fill rule for a kernel name ("rung" or "rung:config")."""
    rung, _, config = kernel.partition(":")
    info = next(k for k in fastsgemm.kernels() if k.name == rung)
    return next(c for c in info.configs if c.name == config).fill if config else info.fill


def whole_k(kernel):
    """Whether the planner never cuts this kernel's K (the registry's fill, whole_k: ozaki's)."""
    fill = fill_of(kernel)
    return fill is not None and len(fill) > 4 and bool(fill[4])


# cuBLAS splits by itself; ozaki never splits (whole_k)
SPLITTING_KERNELS = [p for p in CUDA_KERNELS if not p.values[0].startswith("cublas") and not whole_k(p.values[0])]


def slice_step(m, n, k, kernel=None):
    """The K-slice length operands.c chooses for an m x n x k product of a ladder rung (k: no split)."""
    if kernel is not None and whole_k(kernel):
        return k
    fill = fill_of(kernel) if kernel is not None else None
    short_slice = fill[3] if fill is not None else 0
    short_k = short_slice > 0 and k >= 2 * short_slice  # an engine thin configuration cuts a short K too
    if k < SPLIT_FROM_K and not short_k:
        return k
    slices = min(k // short_slice if short_k else -(-k // SPLIT_SLICE), WORKSPACE_BYTES // (m * n * 4), MAX_SLICES)
    if fill is not None:
        tile_m, tile_n, per_sm = fill[:3]
        blocks, wave = -(-m // tile_m) * -(-n // tile_n), fastsgemm.device_info()["sm_count"] * per_sm
        slices = min(slices, 1 if blocks >= wave else wave // blocks)
    if slices < 2:
        return k
    per = -(-k // slices)
    return -(-per // SLICE_MULTIPLE) * SLICE_MULTIPLE


def poisoned(m, n):
    return fastsgemm.to_device(np.full((m, n), np.nan, np.float32))


class Problem:
    """Host operands, their device copies and the float64 reference, made once per shape."""

    def __init__(self, m, n, k):
        rng = np.random.default_rng([m, n, k])
        self.A, self.B = random_matrix(rng, m, k), random_matrix(rng, k, n)
        self.a, self.b = fastsgemm.to_device(self.A), fastsgemm.to_device(self.B)
        self.ref = reference(self.A, self.B)


@pytest.fixture(scope="module")
def problems():
    made = {}

    def get(m, n, k):
        if (m, n, k) not in made:
            made[m, n, k] = Problem(m, n, k)
        return made[m, n, k]

    return get


SHAPES = [(67, 45, 5000), (256, 256, 16384), (128, 128, 65536)]


@pytest.mark.parametrize("kernel", CUDA_KERNELS)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_long_k_on_device_arrays(kernel, m, n, k, problems):
    assert slice_step(m, n, k) < k, "the shapes are long enough for the 512-deep slices"
    p = problems(m, n, k)
    out = poisoned(m, n)
    result = fastsgemm.sgemm(p.a, p.b, out=out, kernel=kernel)
    assert result is out
    assert_close(out.numpy(), p.ref, tol=tolerance(kernel), what=f"{kernel} {m}x{n}x{k}")


def stored(X, transposed, aligned):
    """X (rows x cols) on the device as sgemm_raw reads it: (device base, element offset, leading dimension).
    Transposed: X^T stored row-major. Aligned: offset 0 and a leading dimension a multiple of 4 (16-byte rows);
    otherwise an odd offset and leading dimension, inside NaN padding."""
    S = X.T if transposed else X
    rows, cols = S.shape
    ld, offset = ((cols + 3) // 4 * 4, 0) if aligned else (cols + 3, 1)
    base = np.full((rows + 1, ld), np.nan, np.float32)
    base.reshape(-1)[offset : offset + rows * ld].reshape(rows, ld)[:, :cols] = S
    return fastsgemm.to_device(base), offset, ld


def raw_product(kernel, m, n, k, a, b, trans_a, trans_b, a_k0=0, b_k0=0):
    """D = A[:, k0:k0+k] B[k0:k0+k, :] by sgemm_raw into a NaN-poisoned row-major m x n, as a host array. a and b
    are stored() triples; a_k0 and b_k0 move the operands on to column (row) k0 of A (B)."""
    (a_dev, a_off, lda), (b_dev, b_off, ldb) = a, b
    a_off += a_k0 * lda if trans_a else a_k0
    b_off += b_k0 if trans_b else b_k0 * ldb
    out = poisoned(m, n)
    fastsgemm.sgemm_raw(m, n, k, 1.0, a_dev.ptr + 4 * a_off, lda, b_dev.ptr + 4 * b_off, ldb, 0.0, out.ptr, n,
                        kernel=kernel, trans_a=trans_a, trans_b=trans_b)
    return out.numpy()


# (trans_a, trans_b, aligned): both column-major (the vector and cp.async paths, then the scalar ones), both
# row-major but unaligned, and one of each.
OPERAND_LAYOUTS = [(True, True, True), (True, True, False), (False, False, False), (True, False, True)]


@pytest.mark.parametrize("kernel", CUDA_KERNELS)
@pytest.mark.parametrize("trans_a,trans_b,aligned", OPERAND_LAYOUTS,
                         ids=[f"{'col' if ta else 'row'}_{'col' if tb else 'row'}_{'aligned' if al else 'unaligned'}"
                              for ta, tb, al in OPERAND_LAYOUTS])
def test_operand_layouts(kernel, trans_a, trans_b, aligned, problems):
    """A slice starts k0 into a row-major A's rows and k0 * lda into a column-major A; B the other way round."""
    m, n, k = 100, 70, 6000
    p = problems(m, n, k)
    a, b = stored(p.A, trans_a, aligned), stored(p.B, trans_b, aligned)
    result = raw_product(kernel, m, n, k, a, b, trans_a, trans_b)
    assert_close(result, p.ref, tol=tolerance(kernel),
                 what=f"{kernel} {m}x{n}x{k} trans_a={trans_a} trans_b={trans_b} aligned={aligned}")


@pytest.mark.parametrize("kernel", CUDA_KERNELS)
@pytest.mark.parametrize("where", ["device", "in_place", "host_col_major_out"])
def test_beta_and_c(kernel, where, problems):
    """alpha and beta * C are applied once, after the slices are summed; also into out=C (BLAS's in-place
    update) and into a column-major output (computed as the row-major D^T = B^T A^T)."""
    m, n, k = 90, 130, 9000
    p = problems(m, n, k)
    C = random_matrix(np.random.default_rng(9000), m, n)
    alpha, beta = 0.5, -1.5
    expected = reference(p.A, p.B, C, alpha, beta)
    if where == "host_col_major_out":
        out = np.asfortranarray(np.full((m, n), np.nan, np.float32))
        fastsgemm.sgemm(p.A, p.B, C, alpha=alpha, beta=beta, out=out, kernel=kernel)
        result = out
    elif where == "in_place":
        c = fastsgemm.to_device(C)
        fastsgemm.sgemm(p.a, p.b, c, alpha=alpha, beta=beta, out=c, kernel=kernel)
        result = c.numpy()
    else:
        out = poisoned(m, n)
        fastsgemm.sgemm(p.a, p.b, fastsgemm.to_device(C), alpha=alpha, beta=beta, out=out, kernel=kernel)
        result = out.numpy()
    assert_close(result, expected, tol=tolerance(kernel), what=f"{kernel} beta and C, {where}")


BITWISE_SHAPES = [(67, 45, 5000), (33, 70, 4097)]  # slices of 512 (the last 392), and of 480 (the last 257)


def short_slice_of(kernel):
    """An engine thin configuration's short_slice (0 for everything else)."""
    fill = fill_of(kernel)
    return fill[3] if fill is not None else 0


def assert_in_order_sum(kernel, m, n, k, trans, step, problems, trans_b=None):
    """The one-launch split product equals the float32 sum, in order, of the unsplit products of K-slices
    of `step` (the last shorter), bit for bit, and is close to float64. A thin configuration would cut a slice's
    own K again: its slices are computed by its rung, whose kernel it runs, unsplit below K = 4097."""
    trans_b = trans if trans_b is None else trans_b
    p = problems(m, n, k)
    a, b = stored(p.A, trans, True), stored(p.B, trans_b, True)
    split = raw_product(kernel, m, n, k, a, b, trans, trans_b)
    unsplit = kernel.partition(":")[0] if short_slice_of(kernel) else kernel
    total = np.zeros((m, n), np.float32)
    for k0 in range(0, k, step):
        part = raw_product(unsplit, m, n, min(step, k - k0), a, b, trans, trans_b, a_k0=k0, b_k0=k0)
        total += part  # float32, in order
    assert not np.isnan(split).any(), f"{kernel}: NaN left in the split result"
    mismatches = np.argwhere(split != total)
    assert mismatches.size == 0, (
        f"{kernel}: {len(mismatches)} elements differ from the in-order sum of slices of {step}, first at "
        f"{mismatches[:3].tolist()}: {split[tuple(mismatches[0])]!r} vs {total[tuple(mismatches[0])]!r}")
    assert_close(split, p.ref, tol=tolerance(kernel), what=f"{kernel} split {m}x{n}x{k}")


@pytest.mark.parametrize("kernel", SPLITTING_KERNELS)
@pytest.mark.parametrize("trans", [False, True], ids=["row_major", "col_major"])
@pytest.mark.parametrize("m,n,k", BITWISE_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in BITWISE_SHAPES])
def test_split_is_the_in_order_sum_of_the_slices(kernel, trans, m, n, k, problems):
    """Each slice sums its K range in one accumulator, in the order an unsplit call on that range does, and
    the slices are added in order in float32: the one-launch split equals that sum bit for bit."""
    step = slice_step(m, n, k, kernel)
    assert step < k and step % SLICE_MULTIPLE == 0
    assert_in_order_sum(kernel, m, n, k, trans, step, problems)


FILLING_KERNELS = [p for p in SPLITTING_KERNELS if fill_of(p.values[0]) is not None]


@pytest.mark.parametrize("kernel", FILLING_KERNELS)
def test_tensor_core_rungs_slice_only_to_fill_the_gpu(kernel, problems):
    """At 1024 x 512 x 8192 the tensor-core rungs' blocks (32 to 128 of them) leave SMs idle, so K is cut,
    but only until one wave fills the GPU: 2 to 8 slices, not the 16 of 512 the SIMT rungs take."""
    m, n, k = 1024, 512, 8192
    step = slice_step(m, n, k, kernel)
    if step == k:
        pytest.skip(f"{kernel}: one wave of this GPU's SMs holds every block here: nothing to slice")
    assert step > SPLIT_SLICE, f"{kernel}: slices of {step}"
    assert_in_order_sum(kernel, m, n, k, False, step, problems)


THIN_KERNELS = [p for p in SPLITTING_KERNELS if short_slice_of(p.values[0])]
# (m, n, k, B column-major): a batch of 1, 8 and 64 through a 1024 -> 1024 layer (x @ W^T: B column-major), a
# ragged one, and a thin column (n small).
THIN_SHAPES = [(1, 1024, 1024, True), (8, 1024, 1024, True), (64, 1024, 1024, False), (5, 1000, 777, True),
               (1000, 7, 999, False)]


def test_thin_configurations_are_found():
    """tf32x3_mma:thin is the engine's thin configuration (registry.c): the tests below have something to run."""
    assert "tf32x3_mma:thin" in [p.values[0] for p in THIN_KERNELS]


@pytest.mark.parametrize("kernel", THIN_KERNELS)
@pytest.mark.parametrize("m,n,k,trans_b", THIN_SHAPES, ids=[f"{m}x{n}x{k}{'-bt' if t else ''}"
                                                            for m, n, k, t in THIN_SHAPES])
def test_thin_configuration_slices_a_short_k(kernel, m, n, k, trans_b, problems):
    """A thin result's short K is cut into slices of at least short_slice, as far as one wave needs, and the
    product is the in-order float32 sum of its rung's unsplit products over the slices, bit for bit."""
    step = slice_step(m, n, k, kernel)
    assert step < k and step % SLICE_MULTIPLE == 0 and step >= short_slice_of(kernel), (kernel, step)
    assert_in_order_sum(kernel, m, n, k, False, step, problems, trans_b=trans_b)


@pytest.mark.parametrize("kernel", THIN_KERNELS)
def test_thin_configuration_leaves_a_full_gpu_whole(kernel, problems):
    """Where the blocks fill a wave already (2048 x 2048 x 1024: 1024 blocks of 64 x 64), K runs whole: the
    thin configuration is its rung, bit for bit."""
    m, n, k = 2048, 2048, 1024
    assert slice_step(m, n, k, kernel) == k
    p = problems(m, n, k)
    a, b = stored(p.A, False, True), stored(p.B, False, True)
    ours = raw_product(kernel, m, n, k, a, b, False, False)
    theirs = raw_product(kernel.partition(":")[0], m, n, k, a, b, False, False)
    assert np.array_equal(ours, theirs), f"{kernel}: differs from its rung on a GPU-filling product"
