"""fastsgemm.testing, the public module the tests and benchmarks check results with."""
import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing as ft


def test_every_kernel_name_has_its_precisions_bound():
    for k in fastsgemm.kernels():
        for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs)):
            assert ft.error_bound(name) == ft.ERROR_BOUND[k.precision], name
    assert ft.error_bound("auto") == ft.ERROR_BOUND["fp32"]
    assert ft.error_bound("cublas_tf32") > ft.error_bound("cublas")  # TF32's bound is the wider
    with pytest.raises(ValueError, match="unknown kernel"):
        ft.error_bound("no_such_rung")


def test_the_bounds_are_read_only():
    with pytest.raises(TypeError):
        ft.ERROR_BOUND["fp32"] = 1.0  # type: ignore[index]


def test_relative_error():
    want = np.array([[3.0, 4.0]])
    assert ft.relative_error(want, want) == 0.0
    assert ft.relative_error(np.array([[3.0, 5.0]], np.float32), want) == pytest.approx(0.2)
    assert ft.relative_error(np.ones((2, 2)), np.zeros((2, 2))) == pytest.approx(2.0)  # absolute: all-zero reference
    with pytest.raises(ValueError, match="shapes"):
        ft.relative_error(np.ones((2, 3)), np.ones((3, 2)))


def test_why_no_gpu_agrees_with_cuda_available():
    assert (ft.why_no_gpu() == "") == fastsgemm.cuda_available()
    assert (fastsgemm.device_count() > 0) == fastsgemm.cuda_available()


def test_without_a_gpu_the_device_helpers_say_why():
    if fastsgemm.cuda_available():
        pytest.skip("a GPU is usable here")
    assert fastsgemm.device_count() == 0
    with pytest.raises(fastsgemm.CudaError):
        ft.current_device()
    with pytest.raises(fastsgemm.CudaError):
        ft.random_device_matrix(4, 4)


@pytest.mark.gpu
def test_random_device_matrices():
    a = ft.random_device_matrix(300, 200, seed=7)
    values = a.numpy()
    assert isinstance(a, fastsgemm.DeviceArray) and values.shape == (300, 200) and values.dtype == np.float32
    assert values.min() >= -1.0 and values.max() < 1.0 and abs(values.mean()) < 0.05 and values.std() > 0.5
    assert np.array_equal(values, ft.random_device_matrix(300, 200, seed=7).numpy())
    assert not np.array_equal(values, ft.random_device_matrix(300, 200, seed=8).numpy())
    assert ft.relative_error(a, values) == 0.0  # a DeviceArray is read back for the comparison
    assert ft.current_device() == 0


@pytest.mark.gpu
def test_random_device_matrices_are_made_on_the_current_device_only():
    """The fill runs on the calling thread's current device: another device is refused, not filled from the wrong
    GPU; the current one may be named in any form sgemm takes."""
    current = ft.current_device()
    assert ft.random_device_matrix(4, 4, device=current).numpy().shape == (4, 4)
    if fastsgemm.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    with pytest.raises(ValueError, match="current device"):
        ft.random_device_matrix(4, 4, device=1 - current if current < 2 else 0)
