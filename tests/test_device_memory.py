"""fastsgemm's own device memory: counted per GPU, capped by a limit that is never passed, given back when freed.
The parsing and the environment variable run everywhere; the counts and the limit on a GPU."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fastsgemm
from conftest import FP32_TOLERANCE
from fastsgemm._memory import parse_bytes


def relative_error(value, a, b):
    reference = a.astype(np.float64) @ b.astype(np.float64)
    return np.linalg.norm(value - reference) / np.linalg.norm(reference)


@pytest.mark.parametrize("text, count", [("1000", 1000), (4096, 4096), ("512MiB", 512 << 20), ("3.2 GB", 3_200_000_000),
                                         ("2gib", 2 << 30), ("0", 0), ("1e3", 1000), ("7 B", 7)])
def test_byte_counts_are_read_as_written(text, count):
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "lots", "5 parsecs", "-1", "1.5.2GB", "GB"])
def test_what_is_not_a_byte_count_is_a_value_error(text):
    with pytest.raises(ValueError, match="byte count"):
        parse_bytes(text)


@pytest.mark.parametrize("value", [1.5, None, True, [1]])
def test_what_is_not_a_number_or_text_is_a_type_error(value):
    with pytest.raises(TypeError, match="byte count"):
        parse_bytes(value)


def test_a_bad_environment_limit_names_the_variable():
    env = dict(os.environ, FASTSGEMM_DEVICE_MEMORY_LIMIT="plenty")
    done = subprocess.run([sys.executable, "-c", "import fastsgemm"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode != 0 and "FASTSGEMM_DEVICE_MEMORY_LIMIT" in done.stderr and "plenty" in done.stderr


@pytest.fixture
def limited():
    """fastsgemm.set_device_memory_limit, with every GPU's limit removed after the test."""
    yield fastsgemm.set_device_memory_limit
    fastsgemm.set_device_memory_limit(None)


@pytest.mark.gpu
def test_the_environment_limit_applies_to_every_gpu():
    code = ("import fastsgemm; n = fastsgemm.device_count(); "
            "print([fastsgemm.device_memory(d)['limit'] for d in range(n)])")
    env = dict(os.environ, FASTSGEMM_DEVICE_MEMORY_LIMIT="256MiB")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    limits = eval(done.stdout)
    assert limits and limits == [256 << 20] * len(limits)


@pytest.mark.gpu
def test_device_arrays_are_counted_and_given_back():
    before = fastsgemm.device_memory()
    assert before["limit"] is None
    held = fastsgemm.DeviceArray.empty((1000, 1000))
    assert fastsgemm.device_memory()["in_use"] == before["in_use"] + 4_000_000
    assert fastsgemm.device_memory()["peak"] >= before["in_use"] + 4_000_000
    del held
    assert fastsgemm.device_memory()["in_use"] == before["in_use"]
    fastsgemm.reset_device_memory_peak()
    assert fastsgemm.device_memory()["peak"] == before["in_use"]


@pytest.mark.gpu
def test_an_allocation_past_the_limit_raises_memory_error_naming_it_and_nothing_is_lost(limited):
    base = fastsgemm.device_memory()["in_use"]
    limited(base + (1 << 20), device=0)
    with pytest.raises(MemoryError, match=rf"limit on cuda:0 is {base + (1 << 20)} bytes; {base} are in use and "
                                          rf"4194304 more were asked"):
        fastsgemm.DeviceArray.empty((1024, 1024), device=0)
    assert fastsgemm.device_memory(0)["in_use"] == base
    # Host operands need device temporaries: refused too, with the same message.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((600, 700), dtype=np.float32), rng.standard_normal((700, 500), dtype=np.float32)
    with pytest.raises(MemoryError, match="fastsgemm.set_device_memory_limit"):
        fastsgemm.sgemm(a, b, kernel="warptile")
    assert fastsgemm.device_memory(0)["in_use"] == base
    limited(None, device=0)
    assert fastsgemm.device_memory(0)["limit"] is None
    assert relative_error(fastsgemm.sgemm(a, b, kernel="warptile"), a, b) < FP32_TOLERANCE  # the context is fine


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["tf32x3", "tf32"])
def test_a_workspace_that_does_not_fit_the_limit_is_packed_in_panels_that_do(kernel, limited):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2048, 4096), dtype=np.float32), rng.standard_normal((4096, 2048), dtype=np.float32)
    a_gpu, b_gpu = fastsgemm.to_device(a, device=0), fastsgemm.to_device(b, device=0)
    out = fastsgemm.DeviceArray.empty((2048, 2048), device=0)
    held = fastsgemm.device_memory(0)["in_use"]
    # The whole K would pack into 2 (2048 + 2048) 4096 floats (134 MB) for tf32x3; a panel of the fewest k-tiles
    # there are (8 of 32) takes 8 MiB of it.
    room = 32 << 20
    limited(held + room, device=0)
    fastsgemm.reset_device_memory_peak(0)
    fastsgemm.sgemm(a_gpu, b_gpu, out=out, kernel=kernel)
    counts = fastsgemm.device_memory(0)
    assert held + (8 << 20) <= counts["peak"] <= held + room  # a workspace in panels was used, and it fit
    assert counts["in_use"] == held
    tolerance = FP32_TOLERANCE if kernel == "tf32x3" else 1e-2
    assert relative_error(out.numpy(), a, b) < tolerance


@pytest.mark.gpu
def test_a_limit_too_small_for_any_panel_takes_the_path_without_a_workspace(limited):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((512, 2048), dtype=np.float32), rng.standard_normal((2048, 512), dtype=np.float32)
    a_gpu, b_gpu = fastsgemm.to_device(a, device=0), fastsgemm.to_device(b, device=0)
    out = fastsgemm.DeviceArray.empty((512, 512), device=0)
    held = fastsgemm.device_memory(0)["in_use"]
    limited(held, device=0)  # not one more byte
    fastsgemm.reset_device_memory_peak(0)
    fastsgemm.sgemm(a_gpu, b_gpu, out=out, kernel="tf32x3")
    assert fastsgemm.device_memory(0)["peak"] <= held
    assert relative_error(out.numpy(), a, b) < FP32_TOLERANCE


@pytest.mark.gpu
def test_limits_are_per_gpu_and_checked():
    with pytest.raises(ValueError, match="byte count"):
        fastsgemm.set_device_memory_limit("-5MB")
    with pytest.raises(ValueError, match="does not exist"):
        fastsgemm.set_device_memory_limit(1 << 30, device=fastsgemm.device_count())
    try:
        fastsgemm.set_device_memory_limit("1GiB", device=0)
        assert fastsgemm.device_memory(0)["limit"] == 1 << 30
        for other in range(1, fastsgemm.device_count()):
            assert fastsgemm.device_memory(other)["limit"] is None
    finally:
        fastsgemm.set_device_memory_limit(None)
