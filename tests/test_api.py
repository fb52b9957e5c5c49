"""The API contract apart from arithmetic: the registry, bad input, the
no-GPU behaviour, the GIL. Runs everywhere; GPU-only parts are marked."""
import functools
import threading
import warnings

import numpy as np
import pytest

import fastsgemm
from conftest import SEED, random_matrix, rung_params

# ---- the registry ----


def test_registry_is_the_ladder():
    infos = fastsgemm.kernels()
    assert [k.name for k in infos] == list(fastsgemm.KERNELS)
    assert len(set(fastsgemm.KERNELS)) == len(fastsgemm.KERNELS)
    numbers = [k.rung for k in infos if k.rung is not None]
    assert numbers == sorted(numbers) and numbers[0] == 0, "ladder rungs are listed in order from 0"
    assert {"cpu", "naive", "cublas"} <= set(fastsgemm.KERNELS)
    for k in infos:
        assert k.device in ("cpu", "cuda") and k.idea and k.max_dim > 0
    assert {k.name: k.device for k in infos}["cpu"] == "cpu"
    assert "auto" not in fastsgemm.KERNELS


def test_configurations_are_named_kernels():
    warptile = next(k for k in fastsgemm.kernels() if k.name == "warptile")
    assert warptile.configs, "warptile ships other configurations for kernel='auto' to choose from"
    for k in fastsgemm.kernels():
        names = [c.name for c in k.configs]
        assert len(set(names)) == len(names) and all(c.shape and c.max_dim > 0 for c in k.configs)
        for c in k.configs:
            choice = fastsgemm._registry.parse_kernel(f"{k.name}:{c.name}")
            assert choice.name == f"{k.name}:{c.name}" and choice.max_dim == c.max_dim
    assert fastsgemm._registry.parse_kernel("warptile").config == -1


@pytest.mark.parametrize("kernel,words", [
    ("warptile:1x1x1", ["warptile", "1x1x1", "128x128x16"]),
    ("naive:64x64", ["naive", "has none"]),
    ("nothing:64x64", ["unknown kernel", "nothing:64x64"]),
    ("warptile:", ["warptile", "no configuration ''"]),
])
def test_unknown_configuration(kernel, words):
    with pytest.raises(ValueError) as raised:
        fastsgemm.sgemm(A, B, kernel=kernel)
    for word in words:
        assert word in str(raised.value), f"{word!r} not in message: {raised.value}"


def test_registry_sources_exist():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parent.parent
    for k in fastsgemm.kernels():
        assert (root / k.source).is_file(), f"{k.name}: {k.source} is missing"
        for c in k.configs:  # a configuration lives in its rung's file, the engine's, or (a lesson) the ladder's
            assert (root / c.source).is_file(), f"{k.name}:{c.name}: {c.source} is missing"
            where = "kernels/ladder/" if c.name == "lesson" else "kernels/engine/"
            assert c.source == k.source or c.source.startswith(where), (k.name, c.name, c.source)
        # every rung has its lesson: its own source, or (where kernel=<name> is the engine's) its "lesson"
        if k.rung:
            lesson = f"kernels/ladder/{k.rung:02d}_{k.name}.cu"
            assert lesson in [k.source] + [c.source for c in k.configs if c.name == "lesson"], (k.name, lesson)
    # No lesson includes an engine file, and no engine file a lesson (issue 46): each half changes without the other.
    for lesson in (root / "kernels" / "ladder").glob("*.cu"):
        engine = [f for f in re.findall(r'^#include\s+"([^"]+)"', lesson.read_text(), re.M) if f.startswith("engine/")]
        assert not engine, (lesson.name, engine)
    for engine_file in (root / "kernels" / "engine").iterdir():
        lessons = [f for f in re.findall(r'^#include\s+"([^"]+)"', engine_file.read_text(), re.M)
                   if f.startswith("ladder/")]
        assert not lessons, (engine_file.name, lessons)


# ---- bad input: clear exceptions, never a crash or a silent cast ----

A = np.ones((4, 3), np.float32)
B = np.ones((3, 5), np.float32)


class FakeDeviceArray:
    """Claims to be device memory; fastsgemm must reject mixing it with host arrays before touching it."""

    __cuda_array_interface__ = {"shape": (3, 5), "typestr": "<f4", "data": (4096, False), "version": 3}


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: fastsgemm.sgemm(A.astype(np.float64), B, kernel="cpu"), TypeError, ["float64", "astype"]),
        (lambda: fastsgemm.sgemm(A, B.astype(np.int32), kernel="cpu"), TypeError, ["B", "int32"]),
        (lambda: fastsgemm.sgemm(A, B.astype(">f4"), kernel="cpu"), TypeError, ["B"]),
        (lambda: fastsgemm.sgemm([[1.0]], B, kernel="cpu"), TypeError, ["list"]),
        (lambda: fastsgemm.sgemm(A, "B", kernel="cpu"), TypeError, ["str"]),
        (lambda: fastsgemm.sgemm(A, None, kernel="cpu"), TypeError, ["NoneType"]),
        (lambda: fastsgemm.sgemm(A[0], B, kernel="cpu"), ValueError, ["2-D", "1-D"]),
        (lambda: fastsgemm.sgemm(A[None], B, kernel="cpu"), ValueError, ["3-D"]),
        (lambda: fastsgemm.sgemm(A, A, kernel="cpu"), ValueError, ["(4, 3)", "not aligned"]),
        (lambda: fastsgemm.sgemm(A, B, kernel="fastest"), ValueError, ["fastest", "cpu", "naive", "cublas", "auto"]),
        (lambda: fastsgemm.sgemm(A, B, kernel=3), TypeError, ["kernel"]),
        (lambda: fastsgemm.sgemm(A, B, beta=1.0, kernel="cpu"), ValueError, ["beta", "C"]),
        (lambda: fastsgemm.sgemm(A, B, np.ones((4, 4), np.float32), beta=1, kernel="cpu"), ValueError, ["C", "(4, 5)"]),
        (lambda: fastsgemm.sgemm(A, B, out=np.ones((5, 4), np.float32), kernel="cpu"), ValueError, ["out", "(4, 5)"]),
        (lambda: fastsgemm.sgemm(A, B, out=np.ones((4, 5)), kernel="cpu"), TypeError, ["out", "float64"]),
        (lambda: fastsgemm.sgemm(A, B, out=np.broadcast_to(np.float32(0), (4, 5)), kernel="cpu"), ValueError, ["read-only"]),
        (lambda: fastsgemm.sgemm(A, B, alpha="2", kernel="cpu"), TypeError, ["alpha"]),
        (lambda: fastsgemm.sgemm(A, B, beta=1j, kernel="cpu"), TypeError, ["beta"]),
        (lambda: fastsgemm.sgemm(A, FakeDeviceArray(), kernel="cpu"), ValueError, ["host", "cuda", "same side"]),
    ],
)
def test_bad_input(call, error, words):
    with pytest.raises(error) as raised:
        call()
    for word in words:
        assert word in str(raised.value), f"{word!r} not in message: {raised.value}"


def test_cuda_error_is_a_runtime_error():
    assert issubclass(fastsgemm.CudaError, RuntimeError)


# ---- without a GPU ----

no_gpu = pytest.mark.skipif(fastsgemm.cuda_available(), reason="checks the behaviour on machines without a GPU")


@no_gpu
def test_without_gpu_auto_falls_back_to_cpu_with_one_warning(rng):
    fastsgemm._api.AUTO_FALLBACK_WARNED.clear()
    X, Y = random_matrix(rng, 8, 6), random_matrix(rng, 6, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = fastsgemm.sgemm(X, Y)
        second = fastsgemm.sgemm(X, Y)
    assert len([w for w in caught if "cpu" in str(w.message)]) == 1
    np.testing.assert_array_equal(first, fastsgemm.sgemm(X, Y, kernel="cpu"))
    np.testing.assert_array_equal(first, second)


@no_gpu
@pytest.mark.parametrize("kernel", [k.name for k in fastsgemm.kernels() if k.device == "cuda"])
def test_without_gpu_cuda_rungs_raise_cuda_error(kernel):
    with pytest.raises(fastsgemm.CudaError, match=kernel):
        fastsgemm.sgemm(A, B, kernel=kernel)


@no_gpu
def test_without_gpu_auto_kernel_is_cpu():
    assert fastsgemm.auto_kernel(4096, 4096, 4096) == "cpu"


@no_gpu
def test_without_gpu_device_info_raises():
    assert fastsgemm.cuda_available() is False
    with pytest.raises(fastsgemm.CudaError):
        fastsgemm.device_info()


# ---- with a GPU ----


@pytest.mark.gpu
def test_device_info():
    info = fastsgemm.device_info()
    assert info["sm_count"] > 0 and info["sm_clock_mhz"] > 0 and len(info["compute_capability"]) == 2
    expected = info["sm_count"] * info["fp32_lanes_per_sm"] * 2 * info["sm_clock_mhz"] / 1000
    assert info["fp32_peak_gflops"] == pytest.approx(expected)
    assert isinstance(info["name"], str) and info["name"]


@pytest.mark.gpu
def test_auto_uses_a_gpu_rung_without_warning(rng):
    X, Y = random_matrix(rng, 8, 6), random_matrix(rng, 6, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(fastsgemm.sgemm(X, Y), X.astype(np.float64) @ Y, rtol=1e-5, atol=1e-5)


# ---- the GIL ----


@pytest.fixture(scope="module")
def long_operands():
    """size -> operands for a long call, made once for every rung (two 4096^2 random matrices take a third of a
    second) and let go with the module."""
    @functools.cache
    def make(size):
        rng = np.random.default_rng([SEED, size])
        return random_matrix(rng, size, size), random_matrix(rng, size, size)
    return make


@pytest.mark.parametrize("kernel", rung_params())
def test_gil_released_while_working(kernel, rng, long_operands):
    """Python code in another thread finishes a fixed amount of work while one long sgemm is running."""
    X, Y = random_matrix(rng, 768, 768), random_matrix(rng, 768, 768)
    fastsgemm.sgemm(X, Y, kernel=kernel)  # warm-up: handles, module load
    # The cpu rung computes; GPU rungs make host-array calls that mostly copy and wait with the GIL released.
    big = long_operands(1536 if kernel == "cpu" else 4096)
    running = threading.Event()
    finished_while_running = []

    def work():
        running.set()
        for _ in range(1 if kernel == "cpu" else 3):
            fastsgemm.sgemm(*big, kernel=kernel)

    worker = threading.Thread(target=work)
    worker.start()
    running.wait()
    total = 0
    for i in range(20000):
        total += i * i
    finished_while_running.append(worker.is_alive())
    worker.join()
    assert finished_while_running == [True], "the other thread could not run Python while sgemm worked"


def test_readme_tables_are_current():
    """The documents' tables (README.md's ladder, the ladder's README, the benchmarks' README, docs/) are generated
    from the registry and committed data."""
    import pathlib
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import readme_tables
    finally:
        sys.path.pop(0)
    stale = [str(path) for path, (current, fresh) in readme_tables.render_all().items() if fresh != current]
    assert not stale, f"stale: {stale}; run python benchmarks/readme_tables.py"


def test_raw_results_index_is_current():
    """benchmarks/results/raw/README.md indexes every raw result (GPU, commit, where it is cited), generated."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "raw_index.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
