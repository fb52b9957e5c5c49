"""The tensor-core rungs' accuracy promises, on the GPU.

tf32 rounds its operands to TF32: its error should be cuBLAS TF32's, not
FP32's. tf32x3 splits each operand into two TF32 parts: its error must stay
within 2x cuBLAS FP32 SGEMM's on the same inputs, at K = 4096 (one pass, no
split-K) and K = 16384, and its Inf and NaN must be numpy's even where the
correction terms alone would turn Inf into NaN.
"""
import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing
from conftest import TRANSPOSE_IDS, TRANSPOSES, needs_hopper, random_matrix, reference

pytestmark = pytest.mark.gpu


def relative_error(kernel, A, B, exact):
    result = fastsgemm.sgemm(A, B, kernel=kernel).astype(np.float64)
    return np.linalg.norm(result - exact) / np.linalg.norm(exact)


@pytest.mark.parametrize("k", [4096, 16384])
def test_tf32x3_within_twice_cublas_fp32(k, rng):
    A, B = random_matrix(rng, 256, k), random_matrix(rng, k, 256)
    exact = reference(A, B)
    mine, cublas = relative_error("tf32x3", A, B, exact), relative_error("cublas", A, B, exact)
    assert mine <= 2 * cublas, f"tf32x3 error {mine:.2e} vs cuBLAS FP32 {cublas:.2e} at K = {k}"


def test_tf32x3_keeps_bits_tf32_loses(rng):
    """The split recovers what rounding to TF32 loses: two orders of magnitude at least."""
    A, B = random_matrix(rng, 128, 1024), random_matrix(rng, 1024, 128)
    exact = reference(A, B)
    one, three = relative_error("tf32", A, B, exact), relative_error("tf32x3", A, B, exact)
    assert three * 100 < one, f"tf32x3 {three:.2e} vs tf32 {one:.2e}"


@pytest.mark.parametrize("kernel", ["tf32", "tf32_tma"])
@pytest.mark.parametrize("k", [1024, 4096])
def test_tf32_error_like_cublas_tf32(kernel, k, rng):
    A, B = random_matrix(rng, 256, k), random_matrix(rng, k, 256)
    exact = reference(A, B)
    mine, cublas = relative_error(kernel, A, B, exact), relative_error("cublas_tf32", A, B, exact)
    assert mine <= 2 * cublas, f"{kernel} error {mine:.2e} vs cuBLAS TF32 {cublas:.2e}"
    assert 1e-5 < mine < 1e-3, f"{kernel} error {mine:.2e} is not TF32's (about 3e-4)"


@pytest.mark.parametrize("kernel", ["tf32", "tf32_tma", "tf32x3"])
def test_inf_times_tf32_exact_values_stays_inf(kernel):
    """B's entries are exact in TF32, so their low parts are 0 and hi(Inf) * lo(B) is Inf * 0 = NaN in a
    correction term: the result must still be numpy's +-Inf."""
    A = np.ones((20, 24), np.float32)
    B = np.full((24, 18), 0.5, np.float32)
    A[2, 3] = np.inf
    A[5, 0] = -np.inf
    A[7, 1] = np.nan
    B[4, 9] = 0.0  # no effect on the Inf rows: A[2, 4] is finite
    with np.errstate(invalid="ignore"):
        expected = A.astype(np.float64) @ B.astype(np.float64)
    result = fastsgemm.sgemm(A, B, kernel=kernel).astype(np.float64)
    np.testing.assert_array_equal(np.isposinf(result), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(result), np.isneginf(expected))
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(result[finite], expected[finite])  # 12 and 11.5: exact in every precision


@pytest.mark.parametrize("kernel,mma_sync", [("tf32", "tf32_mma"), ("tf32_tma", "tf32_mma"), ("tf32x3", "tf32x3_mma")])
def test_hopper_wgmma_rungs_and_their_mma_sync_rungs_differ(kernel, mma_sync, rng):
    """On compute capability 9.0, the wgmma rungs run wgmma, and elsewhere the mma.sync rung of the same math
    (every correctness test runs both). The two sum in different orders, so different bits show two paths
    ran."""
    needs_hopper()
    A, B = random_matrix(rng, 256, 512), random_matrix(rng, 512, 256)
    exact = reference(A, B)
    default, ampere = fastsgemm.sgemm(A, B, kernel=kernel), fastsgemm.sgemm(A, B, kernel=mma_sync)
    assert not np.array_equal(default, ampere), f"{kernel} and {mma_sync} gave the same bits"
    bound = fastsgemm.testing.ERROR_BOUND[next(k.precision for k in fastsgemm.kernels() if k.name == kernel)]
    for result in (default, ampere):
        assert np.linalg.norm(result - exact) / np.linalg.norm(exact) < bound


# (m, n, k): whole tiles; partial tiles on every edge; a K that is no multiple of 4 (the direct path's scalar
# loads); and a long K, split into slices (csrc/operands.c), each slice read from the middle of the operands.
DIRECT_SHAPES = [(256, 128, 256), (130, 70, 100), (67, 45, 5001), (200, 96, 9000)]


@pytest.mark.parametrize("m,n,k", DIRECT_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in DIRECT_SHAPES])
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_direct_path_equals_the_packed_path_bit_for_bit(m, n, k, trans_a, trans_b, rng):
    """tf32x3:direct splits A and B inside the GEMM where tf32x3:128x64 packs them first; the split, the tiles
    and the order of the sums are the same, so on Hopper the two must agree bit for bit, for row- and
    column-major operands (k contiguous or not; 16-byte loads or not) and at every edge. The comparison cannot
    pass by accident: tf32x3 and tf32x3_mma differ in their bits (the test above)."""
    needs_hopper()
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    # Column-major operands are their transposes stored row-major, read through sgemm_raw's transpose flags.
    a = fastsgemm.to_device(np.ascontiguousarray(A.T) if trans_a else A)
    b = fastsgemm.to_device(np.ascontiguousarray(B.T) if trans_b else B)
    lda, ldb = (m if trans_a else k), (k if trans_b else n)
    results = {}
    for kernel in ("tf32x3:direct", "tf32x3:128x64"):
        out = fastsgemm.to_device(np.full((m, n), np.nan, np.float32))
        fastsgemm.sgemm_raw(m, n, k, 1.0, a.ptr, lda, b.ptr, ldb, 0.0, out.ptr, n, kernel=kernel,
                            trans_a=trans_a, trans_b=trans_b)
        results[kernel] = out.numpy()
    direct, packed = results["tf32x3:direct"], results["tf32x3:128x64"]
    assert not np.isnan(direct).any()
    mismatches = np.argwhere(direct != packed)
    assert mismatches.size == 0, f"{len(mismatches)} elements differ, first at {mismatches[:3].tolist()}"
    exact = reference(A, B)
    assert np.linalg.norm(direct - exact) / np.linalg.norm(exact) < fastsgemm.testing.ERROR_BOUND["fp32"]


# tf32x3_regs reads A raw by tensor copies where it can (row-major, 16-byte aligned, lda a multiple of 4) and runs
# tf32x3 where it cannot: its shapes cover both, an edge in every dimension, and a long K in slices.
REGS_SHAPES = [(256, 128, 256), (130, 70, 100), (67, 45, 5001), (200, 96, 9000), (1, 300, 4), (300, 1, 36)]


# Each configuration of tf32x3_regs, and the configuration of tf32x3 with the same tiles (and so the same split of
# a long K into slices) and the same epilogue: nvcc contracts alpha acc + beta C into one FMA in some kernels and
# not in others (seen on the H200: the two direct paths agree with each other and differ from the packed ones in
# the last bit where beta != 0).
REGS_PAIRS = [("tf32x3_regs", "tf32x3"), ("tf32x3_regs:4steps", "tf32x3"), ("tf32x3_regs:direct", "tf32x3:direct")]


@pytest.mark.parametrize("kernel,packed", REGS_PAIRS, ids=[k for k, _ in REGS_PAIRS])
@pytest.mark.parametrize("m,n,k", REGS_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in REGS_SHAPES])
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_a_split_in_registers_equals_the_packed_path_bit_for_bit(kernel, packed, m, n, k, trans_a, trans_b, rng):
    """tf32x3_regs splits A in the consumers' registers where tf32x3 packs it first; the split, the tiles and the
    order of the sums are the same, so the two must agree bit for bit on Hopper, also with alpha and beta. A
    wrong register layout of A, a k-tile read from the wrong place, a raw tile given back to the copies before it
    was read, or garbage past an edge where zeros should have arrived would each show here."""
    needs_hopper()
    A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
    a = fastsgemm.to_device(np.ascontiguousarray(A.T) if trans_a else A)
    b = fastsgemm.to_device(np.ascontiguousarray(B.T) if trans_b else B)
    lda, ldb = (m if trans_a else k), (k if trans_b else n)
    results = {}
    for name in (kernel, packed):
        out = fastsgemm.to_device(C)
        fastsgemm.sgemm_raw(m, n, k, 1.5, a.ptr, lda, b.ptr, ldb, -0.5, out.ptr, n, kernel=name,
                            trans_a=trans_a, trans_b=trans_b)
        results[name] = out.numpy()
    mine = results[kernel]
    assert not np.isnan(mine).any()
    mismatches = np.argwhere(mine != results[packed])
    assert mismatches.size == 0, f"{len(mismatches)} elements differ, first at {mismatches[:3].tolist()}"
    exact = 1.5 * reference(A, B) - 0.5 * C.astype(np.float64)
    assert np.linalg.norm(mine - exact) / np.linalg.norm(exact) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("kernel,packed", REGS_PAIRS, ids=[k for k, _ in REGS_PAIRS])
def test_stacks_split_in_registers_equal_the_packed_path_bit_for_bit(kernel, packed, rng):
    """A stack on tf32x3_regs: each product's own A through the tensor map's third dimension, a shared A (the
    products' B and results side by side do not fold into one product when B's stack is every other matrix), and
    a stack step that is no multiple of 4 floats (tf32x3 runs it; the direct path takes any): bit for bit the
    packed path's."""
    torch = pytest.importorskip("torch")
    needs_hopper()
    cases = {
        "own A": (torch.randn(6, 130, 100, device="cuda"), torch.randn(6, 100, 70, device="cuda")),
        "shared A": (torch.randn(130, 100, device="cuda"), torch.randn(12, 100, 70, device="cuda")[::2]),
        "odd step": (torch.randn(5 * 2950, device="cuda").as_strided((5, 67, 43), (2950, 44, 1)),
                     torch.randn(5, 43, 45, device="cuda")),
    }
    for what, (a, b) in cases.items():
        mine = fastsgemm.matmul(a, b, kernel=kernel)
        assert torch.equal(mine, fastsgemm.matmul(a, b, kernel=packed)), f"{kernel}, {what}: differs from {packed}"
        expected = torch.matmul(a.double(), b.double())
        assert float((mine.double() - expected).norm() / expected.norm()) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("kernel, workspace", [("tf32x3_regs", "B"), ("tf32x3_regs:4steps", "B"),
                                               ("tf32x3_regs:direct", None), ("tf32x3", "A and B")])
@pytest.mark.parametrize("a_layout", ["row-major", "column-major"])
def test_the_workspace_shows_what_is_packed(kernel, workspace, a_layout):
    """Rung 21's idea measured by fastsgemm's own device-memory count: its pack pass packs B alone (hi and lo of
    its row tiles), so its workspace is B's; the direct path has none; tf32x3 packs both. A column-major A
    cannot be read by the tensor copy, and tf32x3_regs then runs tf32x3: A and B. The bit-for-bit tests cannot
    tell the two paths apart (they give the same numbers): this one does."""
    needs_hopper()
    m, n, k = 4096, 256, 1024
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    a = fastsgemm.to_device(np.ascontiguousarray(A.T) if a_layout == "column-major" else A)
    b = fastsgemm.to_device(B)
    out = fastsgemm.DeviceArray.empty((m, n))
    held = fastsgemm.device_memory()["in_use"]
    fastsgemm.reset_device_memory_peak()
    fastsgemm.sgemm_raw(m, n, k, 1.0, a.ptr, m if a_layout == "column-major" else k, b.ptr, n, 0.0, out.ptr, n,
                        kernel=kernel, trans_a=a_layout == "column-major")
    # Counted when the workspace is taken, before the kernels run, and given back once they are queued.
    part_tile = 128 * 32 * 4  # one packed tile, hi or lo: 128 rows x 32 k, FP32
    packs = {"B": n // 128, "A and B": (m + n) // 128, None: 0}[workspace]
    if a_layout == "column-major" and kernel in ("tf32x3_regs", "tf32x3_regs:4steps"):
        packs = (m + n) // 128  # tf32x3 ran
    assert fastsgemm.device_memory()["peak"] - held == packs * (k // 32) * 2 * part_tile
    assert fastsgemm.device_memory()["in_use"] == held
    exact = reference(A, B)
    assert np.linalg.norm(out.numpy() - exact) / np.linalg.norm(exact) < fastsgemm.testing.ERROR_BOUND["fp32"]


@pytest.mark.parametrize("kernel, parts, packs_a", [("tf32x3", 2, True), ("tf32", 1, True),
                                                    ("tf32x3_regs", 2, False)])
def test_a_workspace_past_what_the_pool_keeps_runs_in_k_panels(kernel, parts, packs_a, rng):
    """Packed operands larger than what the workspace pool keeps between calls (a 64th of the GPU's memory,
    kernels/support/workspace_pool.c) are packed and multiplied in K panels, each adding onto D
    (kernels/engine/pack.cuh): checked for the product, for alpha and beta with C, and for C updated in place.
    K is about 1.6 times what fits, and not a multiple of the 32-deep k-tiles: two panels, the last ragged.
    A and B (1-2 GB each) are made on the GPU; the product is checked on rows and columns spread over every tile."""
    from conftest import tolerance

    m, n = 2048, 2048
    keeps = fastsgemm.device_info()["total_memory_bytes"] // 64
    packed_rows = m + n if packs_a else n  # tf32x3_regs packs B only, and reads each panel's A at its own k
    # A ragged last k-tile either way: 5 past whole tiles for the packed kernels (an lda that is no multiple of 4,
    # which the pack pass takes), 8 for tf32x3_regs, whose tensor copy of A needs one (with 5 tf32x3 would run).
    k = int(1.6 * keeps / (4 * parts * packed_rows)) // 32 * 32 + (5 if packs_a else 8)
    dA = fastsgemm.testing.random_device_matrix(m, k, seed=1)
    dB = fastsgemm.testing.random_device_matrix(k, n, seed=2)
    C = random_matrix(rng, m, n)
    # 16 rows and columns at each end, and one in every 61 between: every 128-wide tile of D is checked.
    rows = cols = np.unique(np.r_[0:16, m - 16:m, 16:m - 16:61])
    exact = dA.numpy()[rows].astype(np.float64) @ dB.numpy()[:, cols].astype(np.float64)

    def error(result, expected):
        return np.linalg.norm(result.numpy()[np.ix_(rows, cols)] - expected) / np.linalg.norm(expected)

    out = fastsgemm.to_device(np.full((m, n), np.nan, np.float32))
    fastsgemm.sgemm(dA, dB, out=out, kernel=kernel)
    assert error(out, exact) < tolerance(kernel)
    with_c = 2.0 * exact - 0.5 * C[np.ix_(rows, cols)]
    fastsgemm.sgemm(dA, dB, fastsgemm.to_device(C), alpha=2.0, beta=-0.5, out=out, kernel=kernel)
    assert error(out, with_c) < tolerance(kernel)
    in_place = fastsgemm.to_device(C)
    fastsgemm.sgemm(dA, dB, in_place, alpha=2.0, beta=-0.5, out=in_place, kernel=kernel)
    assert error(in_place, with_c) < tolerance(kernel)
