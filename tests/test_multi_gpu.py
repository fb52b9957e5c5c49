"""Operands on a GPU that is not the current one: computed on their own GPU, on that GPU's current stream, with
the kernel auto picks for that GPU; operands on different GPUs refused with the devices named. Needs two GPUs
(skipped otherwise); torch and CuPy parts skip where those are missing."""
import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing
from conftest import FP32_TOLERANCE


def gpu_count():
    return fastsgemm.device_count()


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(gpu_count() < 2, reason="needs two CUDA devices")]


def relative_error(value, a, b):
    reference = np.matmul(a.astype(np.float64), b.astype(np.float64))
    return np.linalg.norm(value - reference) / np.linalg.norm(reference)


@pytest.fixture
def on_device_zero():
    """Device 0 current during the test, as a user's process has it; checked to be current still afterwards."""
    torch = pytest.importorskip("torch")  # to set the current device (the runtime's, shared by the process)
    previous = fastsgemm.testing.current_device()
    torch.cuda.set_device(0)
    yield
    assert fastsgemm.testing.current_device() == 0, "a call left another device current"
    torch.cuda.set_device(previous)


@pytest.mark.parametrize("kernel", ["auto", "cublas", "tf32x3", "warptile"])
def test_torch_operands_on_the_other_gpu_are_computed_there(kernel, rng, on_device_zero):
    torch = pytest.importorskip("torch")
    a, b = rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 100), dtype=np.float32)
    ta, tb = torch.from_numpy(a).to("cuda:1"), torch.from_numpy(b).to("cuda:1").T.contiguous().T
    assert torch.cuda.current_device() == 0
    for result in (fastsgemm.sgemm(ta, tb, kernel=kernel), fastsgemm.matmul(ta, tb, kernel=kernel)):
        assert result.device == torch.device("cuda:1")
        assert relative_error(result.cpu().numpy(), a, b) < FP32_TOLERANCE
    out = torch.full((300, 100), float("nan"), device="cuda:1")
    assert fastsgemm.sgemm(ta, tb, out=out, kernel=kernel) is out
    assert relative_error(out.cpu().numpy(), a, b) < FP32_TOLERANCE
    stack = torch.randn(3, 300, 200, device="cuda:1")
    assert relative_error(fastsgemm.matmul(stack, tb, kernel=kernel).cpu().numpy(), stack.cpu().numpy(), b) \
        < FP32_TOLERANCE


def test_the_other_gpus_current_stream_orders_the_work(rng, on_device_zero):
    """Device 1's current stream is a side stream, busy when the inputs are written to it: a product that ran on
    any other stream would read them unwritten (NaN)."""
    torch = pytest.importorskip("torch")
    a, b = rng.standard_normal((512, 512), dtype=np.float32), rng.standard_normal((512, 256), dtype=np.float32)
    side = torch.cuda.Stream(device="cuda:1")
    ta = torch.full((512, 512), float("nan"), device="cuda:1")
    tb = torch.full((512, 256), float("nan"), device="cuda:1")
    host_a, host_b = torch.from_numpy(a).pin_memory(), torch.from_numpy(b).pin_memory()
    torch.cuda.synchronize("cuda:1")
    with torch.cuda.stream(side):  # device 1 current, its current stream `side`
        torch.cuda._sleep(50_000_000)  # tens of milliseconds of `side` before the inputs land
        ta.copy_(host_a, non_blocking=True)
        tb.copy_(host_b, non_blocking=True)
        with torch.cuda.device(0):  # device 0 current again; device 1's current stream stays `side`
            assert fastsgemm.testing.current_device() == 0
            results = [fastsgemm.sgemm(ta, tb), fastsgemm.matmul(ta, tb)]
        side.synchronize()
    for result in results:
        assert relative_error(result.cpu().numpy(), a, b) < FP32_TOLERANCE


def test_cupy_and_device_arrays_on_the_other_gpu(rng, on_device_zero):
    a, b = rng.standard_normal((130, 70), dtype=np.float32), rng.standard_normal((70, 90), dtype=np.float32)
    da, db = fastsgemm.to_device(a, device=1), fastsgemm.to_device(b, device=1)
    result = fastsgemm.sgemm(da, db)
    assert result.device == 1
    assert relative_error(result.numpy(), a, b) < FP32_TOLERANCE
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(1):
        ca, cb = cupy.asarray(a), cupy.asarray(b)
    for result in (fastsgemm.sgemm(ca, cb), fastsgemm.matmul(ca, cb)):
        assert result.device.id == 1
        assert relative_error(cupy.asnumpy(result), a, b) < FP32_TOLERANCE


def test_auto_picks_with_the_operands_gpus_table(monkeypatch, on_device_zero):
    """kernel="auto" asks the tuning table about the operands' GPU (device 1), on the C fast path (torch tensors)
    and on the general path (an object offering only __cuda_array_interface__)."""
    torch = pytest.importorskip("torch")
    asked = []
    original = fastsgemm._tuning.choose

    def recording(device, m, n, k, count=1):
        asked.append((device, m, n, k))
        return original(device, m, n, k, count)

    monkeypatch.setattr(fastsgemm._tuning, "choose", recording)

    class OnlyTheInterface:
        def __init__(self, tensor):
            self.__cuda_array_interface__ = tensor.__cuda_array_interface__

    ta, tb = torch.randn(123, 45, device="cuda:1"), torch.randn(45, 67, device="cuda:1")
    fastsgemm.sgemm(ta, tb)  # a shape no other test uses: the fast path's cache has not seen it
    fastsgemm.sgemm(OnlyTheInterface(ta), OnlyTheInterface(tb))
    torch.cuda.synchronize("cuda:1")
    assert (1, 123, 67, 45) in asked and all(device == 1 for device, *_ in asked), asked
    assert fastsgemm.auto_kernel(123, 67, 45, device=1) == fastsgemm.auto_kernel(123, 67, 45,
                                                                                device=torch.device("cuda:1"))
    # torch.device("cuda") names no index: the current device, as torch reads it.
    assert fastsgemm.auto_kernel(123, 67, 45, device=torch.device("cuda")) == fastsgemm.auto_kernel(123, 67, 45,
                                                                                                   device=0)


def test_auto_kernel_takes_a_device_and_refuses_one_that_is_not_there():
    assert fastsgemm.auto_kernel(1024, 1024, 1024, device=1).partition(":")[0] in fastsgemm.KERNELS
    with pytest.raises(ValueError, match="device 7 does not exist"):
        fastsgemm.auto_kernel(64, 64, 64, device=7)
    with pytest.raises(TypeError, match="device must be"):
        fastsgemm.auto_kernel(64, 64, 64, device="gpu one")
    assert fastsgemm.device_info(1)["name"] == fastsgemm.device_info(device=1)["name"]


def test_operands_on_different_gpus_raise_value_error_naming_the_devices(on_device_zero):
    torch = pytest.importorskip("torch")
    a0, b1 = torch.randn(64, 32, device="cuda:0"), torch.randn(32, 16, device="cuda:1")
    with pytest.raises(ValueError, match=r"A on device 0.*B on device 1"):
        fastsgemm.sgemm(a0, b1)
    with pytest.raises(ValueError, match=r"A on device 0.*B on device 1"):
        fastsgemm.matmul(a0, b1)
    a1, b1b = torch.randn(64, 32, device="cuda:1"), torch.randn(32, 16, device="cuda:1")
    out0 = torch.empty(64, 16, device="cuda:0")
    with pytest.raises(ValueError, match=r"A on device 1.*out on device 0"):
        fastsgemm.sgemm(a1, b1b, out=out0)
    with pytest.raises(ValueError, match=r"A on device 1.*out on device 0"):
        fastsgemm.matmul(a1, b1b, out=out0)
    c0 = torch.zeros(64, 16, device="cuda:0")
    with pytest.raises(ValueError, match=r"A on device 1.*C on device 0"):
        fastsgemm.sgemm(a1, b1b, c0, beta=1.0)


def test_autograd_on_the_other_gpu(on_device_zero):
    torch = pytest.importorskip("torch")
    import fastsgemm.torch as fst

    layer = fst.Linear(48, 24, device="cuda:1")
    x = torch.randn(5, 48, device="cuda:1", requires_grad=True)
    layer(x).square().sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, layer.weight, layer.bias))
    torch.nn.functional.linear(x64, w64, b64).square().sum().backward()
    for value, reference in ((x.grad, x64.grad), (layer.weight.grad, w64.grad), (layer.bias.grad, b64.grad)):
        assert value.device == torch.device("cuda:1")
        error = torch.linalg.norm(value.double() - reference) / torch.linalg.norm(reference)
        assert float(error) < FP32_TOLERANCE
