"""Reliability: threads, leaks, faults, lifetimes, scale past 2^31 elements,
numerics against cuBLAS. The cpu-rung parts run everywhere (CI); the rest are
marked `gpu`."""
import gc
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastsgemm
from conftest import assert_close, random_matrix, reference, rung_params, tolerance

CUDA_RUNGS = rung_params("cuda")
THREADS = 16


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


# ---- thread safety ----


@pytest.mark.parametrize("kernel", rung_params())
def test_threads_on_host_arrays(kernel):
    """16 threads at once, each with its own shapes, all get correct results."""
    start = threading.Barrier(THREADS)

    def work(t):
        rng = np.random.default_rng(t)
        m, n, k = 17 + 5 * t, 29 + 3 * t, 11 + 7 * t
        A, B, C = random_matrix(rng, m, k), random_matrix(rng, k, n), random_matrix(rng, m, n)
        start.wait()
        for _ in range(5):
            result = fastsgemm.sgemm(A, B, C, alpha=0.5, beta=1.5, kernel=kernel)
            assert_close(result, reference(A, B, C, 0.5, 1.5), tol=tolerance(kernel), what=f"{kernel} thread {t}")
        return t

    with ThreadPoolExecutor(THREADS) as pool:
        assert sorted(pool.map(work, range(THREADS))) == list(range(THREADS))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", CUDA_RUNGS)
def test_threads_on_device_arrays_and_streams(kernel):
    """16 threads, each on its own CuPy stream with its own shapes, all get correct results."""
    cupy = pytest.importorskip("cupy")
    start = threading.Barrier(THREADS)

    def work(t):
        rng = np.random.default_rng(100 + t)
        m, n, k = 64 + 9 * t, 48 + 13 * t, 33 + 5 * t
        A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
        with cupy.cuda.Stream(non_blocking=True) as stream:
            a, b = cupy.asarray(A), cupy.asarray(B)
            start.wait()
            results = [fastsgemm.sgemm(a, b, kernel=kernel) for _ in range(5)]
            stream.synchronize()
        for r in results:
            assert_close(cupy.asnumpy(r), reference(A, B), tol=tolerance(kernel), what=f"{kernel} thread {t}")
        return t

    with ThreadPoolExecutor(THREADS) as pool:
        assert sorted(pool.map(work, range(THREADS))) == list(range(THREADS))


# ---- leaks ----


def test_no_leaks_on_the_host_path():
    """10,000 calls: host memory stays flat and the inputs' reference counts are unchanged."""
    rng = np.random.default_rng(1)
    A, B, C = random_matrix(rng, 24, 16), random_matrix(rng, 16, 20), random_matrix(rng, 24, 20)
    out = np.empty((24, 20), np.float32)
    counts = [sys.getrefcount(x) for x in (A, B, C, out)]
    for _ in range(500):  # warm-up: allocator pools settle, and what the error path imports on first use is in
        fastsgemm.sgemm(A, B, C, beta=1.0, out=out, kernel="cpu")
    with pytest.raises(TypeError):
        fastsgemm.sgemm(A, B.astype(np.float64), kernel="cpu")
    gc.collect()
    before = _resident_bytes()
    for i in range(10_000):
        fastsgemm.sgemm(A, B, C, beta=1.0, out=out, kernel="cpu")
        fastsgemm.sgemm(A.T.T[::1], B, kernel="cpu")  # a fresh result each time
        if i % 2000 == 0:
            with pytest.raises(TypeError):  # the error path must not leak either
                fastsgemm.sgemm(A, B.astype(np.float64), kernel="cpu")
    gc.collect()
    grown = _resident_bytes() - before
    assert grown < 4 * 2**20, f"host memory grew by {grown / 2**20:.1f} MiB over 10,000 calls"
    assert [sys.getrefcount(x) for x in (A, B, C, out)] == counts


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["warptile", "cublas"])
def test_no_leaks_on_the_device_paths(kernel):
    """10,000 calls with host inputs and 10,000 with device inputs: device and host memory flat,
    reference counts unchanged."""
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(2)
    A, B = random_matrix(rng, 40, 24), random_matrix(rng, 24, 36)
    a, b, o = cupy.asarray(A), cupy.asarray(B), cupy.empty((40, 36), cupy.float32)
    counts = [sys.getrefcount(x) for x in (A, B, a, b, o)]
    host_out = np.empty((40, 36), np.float32)
    for _ in range(200):
        fastsgemm.sgemm(A, B, out=host_out, kernel=kernel)
        fastsgemm.sgemm(a, b, out=o, kernel=kernel)
    cupy.cuda.Device().synchronize()
    gc.collect()
    free_before, host_before = cupy.cuda.runtime.memGetInfo()[0], _resident_bytes()
    for _ in range(10_000):
        fastsgemm.sgemm(A, B, out=host_out, kernel=kernel)
        fastsgemm.sgemm(a, b, out=o, kernel=kernel)
    cupy.cuda.Device().synchronize()
    gc.collect()
    free_after, host_after = cupy.cuda.runtime.memGetInfo()[0], _resident_bytes()
    assert free_before - free_after < 8 * 2**20, f"device memory fell by {(free_before - free_after) / 2**20:.1f} MiB"
    assert host_after - host_before < 8 * 2**20, f"host memory grew by {(host_after - host_before) / 2**20:.1f} MiB"
    assert [sys.getrefcount(x) for x in (A, B, a, b, o)] == counts
    assert_close(host_out, reference(A, B), tol=tolerance(kernel), what=kernel)


# ---- faults ----


@pytest.mark.gpu
def test_every_rung_works_after_an_error(rng):
    """A failed call (out of memory, bad input) leaves every rung usable."""
    with pytest.raises(MemoryError):
        fastsgemm.DeviceArray.empty((300_000, 300_000))
    with pytest.raises(ValueError):
        fastsgemm.sgemm(np.ones((3, 4), np.float32), np.ones((5, 6), np.float32))
    A, B = random_matrix(rng, 33, 21), random_matrix(rng, 21, 17)
    for k in fastsgemm.kernels():
        assert_close(fastsgemm.sgemm(A, B, kernel=k.name), reference(A, B), tol=tolerance(k.name), what=f"{k.name} after errors")


STICKY_SCRIPT = r"""
import cupy, numpy, fastsgemm
a = cupy.ones((4, 4), cupy.float32)
o = cupy.empty((4, 4), cupy.float32)  # allocated before the fault: CuPy's allocator is not what we test
# fastsgemm refuses operands that reach outside their allocation before any kernel runs (tests/test_lying_device.py),
# so the fault comes from another kernel in the same process: one that writes through a pointer into no allocation.
fault = cupy.RawKernel(r'extern "C" __global__ void fault(float *p) { p[threadIdx.x] = 1.0f; }', "fault")
try:
    fault((1,), (32,), (numpy.uint64(0x100),))
    cupy.cuda.Device().synchronize()
    print("NO ERROR")
except Exception as error:
    print("FIRST", type(error).__name__, error)
try:
    fastsgemm.sgemm(a, a, out=o, kernel="naive")
    print("SECOND OK")
except Exception as error:
    print("SECOND", type(error).__name__, error)
"""


@pytest.mark.gpu
def test_sticky_error_is_reported_as_such():
    """An illegal address inside a kernel loses the CUDA context: every fastsgemm call from then on says so, and
    says what to do. Run in a child process, which the error ruins."""
    pytest.importorskip("cupy")
    done = subprocess.run([sys.executable, "-c", STICKY_SCRIPT], capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert "NO ERROR" not in out, out + done.stderr
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("FIRST", "SECOND")))
    assert set(lines) == {"FIRST", "SECOND"}, out + done.stderr
    second = lines["SECOND"]
    assert second.startswith("CudaError") and "sticky" in second and "restart" in second, out


@pytest.mark.gpu
def test_inputs_freed_by_their_framework_during_the_call(rng):
    """Dropping a torch input right after the call is safe: the work is ordered on torch's stream,
    so memory the caching allocator hands out next is written only after the kernel read it."""
    torch = pytest.importorskip("torch")
    A, B = random_matrix(rng, 2048, 2048), random_matrix(rng, 2048, 2048)
    a, b = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    torch.cuda.synchronize()
    result = fastsgemm.sgemm(a, b, kernel="naive")  # slow enough to be running while we reallocate
    del a, b
    garbage = [torch.full((2048, 2048), float("nan"), device="cuda") for _ in range(4)]
    torch.cuda.synchronize()
    assert_close(result.cpu().numpy(), reference(A, B), what="after the inputs were freed")
    del garbage


# ---- scale: more than 2^31 elements in one operand ----


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [p for p in CUDA_RUNGS if p.values[0] != "naive"])
def test_more_than_2_31_elements(kernel, big_operands):
    """A is 50000 x 45000 (2.25e9 elements, 9 GB), B 45000 x 2048: checked on sampled rows in float64."""
    a, b, rows, expected = big_operands
    result = fastsgemm.sgemm(a, b, kernel=kernel)
    got = result[rows].cpu().numpy().astype(np.float64)
    error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
    assert error < tolerance(kernel), f"{kernel}: relative error {error:.2e} on sampled rows"
    del result


@pytest.fixture(scope="module")
def big_operands():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.mem_get_info()[0] < 20 * 2**30:
        pytest.skip("needs 20 GiB of free device memory")
    generator = torch.Generator(device="cuda").manual_seed(7)
    a = torch.rand((50_000, 45_000), device="cuda", generator=generator) - 0.5
    b = torch.rand((45_000, 2048), device="cuda", generator=generator) - 0.5
    rows = torch.tensor([0, 1, 12_345, 33_333, 49_999], device="cuda")
    expected = a[rows].cpu().double().numpy() @ b.cpu().double().numpy()
    yield a, b, rows, expected
    del a, b
    torch.cuda.empty_cache()


# ---- numerics ----


def test_cpu_rung_splits_k_like_the_others(rng):
    """K past 4096 on the cpu rung goes through the host split-K path: still right, and more accurate
    than one sequential FP32 sum."""
    A, B, C = random_matrix(rng, 7, 6000), random_matrix(rng, 6000, 5), random_matrix(rng, 7, 5)
    assert_close(fastsgemm.sgemm(A, B, C, alpha=0.5, beta=-2.0, kernel="cpu"), reference(A, B, C, 0.5, -2.0),
                 what="cpu split-K")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", rung_params("cuda", precision="fp32"))
def test_error_within_twice_cublas_at_k_16384(kernel, rng):
    """Every FP32 rung's error against float64 stays within 2x cuBLAS's at K = 16384 (split-K, csrc/operands.c)."""
    A, B = random_matrix(rng, 256, 16384), random_matrix(rng, 16384, 256)
    exact = reference(A, B)

    def error(name):
        result = fastsgemm.sgemm(A, B, kernel=name).astype(np.float64)
        return np.linalg.norm(result - exact) / np.linalg.norm(exact)

    mine, theirs = error(kernel), error("cublas")
    assert mine <= 2 * theirs, f"{kernel}: error {mine:.2e} vs cuBLAS {theirs:.2e}"
