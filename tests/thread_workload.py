"""One entry point's first call, made from one kind of thread, in a fresh process (tests/test_threads.py runs it).

    python tests/thread_workload.py ENTRY THREAD DEVICE

A thread starts with no CUDA context current, whatever the process's other threads have done, and the runtime
API's cudaGetDevice still answers 0 there. So the call below is the first CUDA work its thread does, and for the
host entries and the device arrays the first of the whole process. It checks the product against float64 and that
the call left the thread's current device as it found it, then prints "ok". Exits non-zero with the error
otherwise.

ENTRY: see ENTRIES. THREAD: thread (threading.Thread), pool (concurrent.futures), dask (a task of Dask's threaded
scheduler), or autograd (torch's autograd worker runs the backward: only for the autograd_* entries). DEVICE: the
CUDA ordinal of the device operands.
"""
import sys
import threading

import numpy as np

import fastsgemm
from fastsgemm import _sgemm

M, K, N = 37, 29, 23
TOLERANCE = 1e-5  # relative Frobenius error against float64; FP32 lands far under it


def check(got, a, b, what):
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape or not np.isfinite(got).all():
        raise AssertionError(f"{what}: shape {got.shape} or values wrong: {got.ravel()[:4]}")
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    if error > TOLERANCE:
        raise AssertionError(f"{what}: relative error {error:.2e}")


class Interface:
    """Only __cuda_array_interface__: sgemm's general path reads it (the C fast path declines it)."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def torch_operands(device):
    import torch

    rng = np.random.default_rng(device)
    a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    on = torch.device("cuda", device)
    return a, b, torch.from_numpy(a).to(on), torch.from_numpy(b).to(on)


def host_operands():
    rng = np.random.default_rng(7)
    return rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)


# Each entry prepares on the main thread (it may make operands there with a framework) and returns `call`, which
# runs on the thread under test: it makes fastsgemm's call alone and returns a check of the result, run next on
# the same thread. What the thread's current device was is read around the call alone: torch's own device guards
# (a copy to the host, a synchronize) may leave another device current, which is torch's choice, not fastsgemm's.

def numpy_sgemm(device):  # host operands, the C fast path
    a, b = host_operands()
    def call():
        got = fastsgemm.sgemm(a, b)
        return lambda: check(got, a, b, "sgemm on NumPy")
    return call


def buffer_sgemm(device):  # host operands the fast path declines: the general path
    a, b = host_operands()
    def call():
        got = fastsgemm.sgemm(memoryview(a), memoryview(b))
        return lambda: check(got, a, b, "sgemm on memoryviews")
    return call


def numpy_matmul(device):  # numpy.matmul's semantics on a stack of host matrices
    a, b = host_operands()
    stack = np.stack([a, a[::-1]])
    def call():
        got = fastsgemm.matmul(stack, b)
        return lambda: (check(got[0], a, b, "matmul on a NumPy stack"),
                        check(got[1], a[::-1], b, "matmul on a NumPy stack"))
    return call


def device_array(device):  # a DeviceArray made, multiplied and read back on the thread
    a, b = host_operands()
    def call():
        da = fastsgemm.DeviceArray.from_numpy(a, device=device)
        db = fastsgemm.to_device(b, device=device)
        product = fastsgemm.sgemm(da, db)
        def finish():
            if product.device != device:
                raise AssertionError(f"the product is on device {product.device}, not {device}")
            check(product.numpy(), a, b, "sgemm on DeviceArrays")
        return finish
    return call


def torch_sgemm(device):  # torch tensors: the C fast path
    a, b, ta, tb = torch_operands(device)
    def call():
        got = fastsgemm.sgemm(ta, tb)
        return lambda: check(got.cpu(), a, b, "sgemm on torch tensors")
    return call


def interface_sgemm(device):  # device operands through __cuda_array_interface__: the general path
    import torch

    a, b, ta, tb = torch_operands(device)
    out = torch.full((M, N), float("nan"), device=ta.device)
    def call():
        fastsgemm.sgemm(Interface(ta), Interface(tb), out=Interface(out))
        return lambda: check(out.cpu(), a, b, "sgemm on __cuda_array_interface__ objects")
    return call


def torch_matmul(device):  # fastsgemm.matmul on a stack of tensors
    import torch

    a, b, ta, tb = torch_operands(device)
    stack = torch.stack([ta, ta.flip(0)])
    def call():
        got = fastsgemm.matmul(stack, tb)
        return lambda: (check(got[0].cpu(), a, b, "matmul on a torch stack"),
                        check(got[1].cpu(), a[::-1], b, "matmul on a torch stack"))
    return call


def sgemm_raw(device):  # raw pointers
    import torch

    a, b, ta, tb = torch_operands(device)
    out = torch.full((M, N), float("nan"), device=ta.device)
    torch.cuda.synchronize(ta.device)  # sgemm_raw runs on the legacy default stream, which waits for nothing else
    def call():
        fastsgemm.sgemm_raw(M, N, K, 1.0, ta.data_ptr(), K, tb.data_ptr(), N, 0.0, out.data_ptr(), N, stream=0)
        return lambda: check(out.cpu(), a, b, "sgemm_raw")
    return call


def cupy_sgemm(device):  # CuPy arrays: the C fast path
    import cupy

    a, b = host_operands()
    with cupy.cuda.Device(device):
        ca, cb = cupy.asarray(a), cupy.asarray(b)
    # No `with cupy.cuda.Device` on the thread: that would make a context current there before fastsgemm's call.
    def call():
        got = fastsgemm.sgemm(ca, cb)
        return lambda: check(cupy.asnumpy(got), a, b, "sgemm on CuPy arrays")
    return call


def torch_forward(device):  # fastsgemm.torch's differentiable product, forward and backward on the thread
    import torch

    import fastsgemm.torch as ft

    a, b, ta, tb = torch_operands(device)
    ta.requires_grad_(True)
    def call():
        out = ft.matmul(ta, tb)
        def finish():
            check(out.detach().cpu(), a, b, "fastsgemm.torch.matmul")
            out.sum().backward()
            check(ta.grad.cpu(), np.ones((M, N), np.float32), b.T, "fastsgemm.torch.matmul's gradient")
        return finish
    return call


ENTRIES = {f.__name__: f for f in (numpy_sgemm, buffer_sgemm, numpy_matmul, device_array, torch_sgemm,
                                   interface_sgemm, torch_matmul, sgemm_raw, cupy_sgemm, torch_forward)}

# The backward on torch's autograd worker, as that thread's first CUDA work (the forward runs on the main thread).
def autograd(device, how):
    import torch

    import fastsgemm.torch as ft

    a, b, ta, tb = torch_operands(device)
    ta.requires_grad_(True)
    tb.requires_grad_(True)
    out = ft.matmul(ta, tb)
    check(out.detach().cpu(), a, b, "the forward")
    grad = np.random.default_rng(3).standard_normal((M, N), dtype=np.float32)
    if how == "backward":
        out.backward(torch.from_numpy(grad).to(ta.device))
        ga, gb = ta.grad, tb.grad
    elif how == "sum":  # .sum()'s backward launches nothing: fastsgemm's products are the thread's first work
        grad = np.ones((M, N), np.float32)
        out.sum().backward()
        ga, gb = ta.grad, tb.grad
    else:
        ga, gb = torch.autograd.grad(out, (ta, tb), torch.from_numpy(grad).to(ta.device))
    check(ga.cpu(), grad, b.T, "dA")
    check(gb.cpu(), a.T, grad, "dB")


def current_context():
    """The calling thread's current CUDA context as the driver sees it (None: none), asked through ctypes so that
    nothing of fastsgemm's is involved."""
    import ctypes

    driver = ctypes.CDLL("libcuda.so.1")
    context = ctypes.c_void_p()
    result = driver.cuCtxGetCurrent(ctypes.byref(context))
    if result == 3:  # CUDA_ERROR_NOT_INITIALIZED: no context anywhere yet
        return None
    if result != 0:
        raise RuntimeError(f"cuCtxGetCurrent failed with CUresult {result}")
    return context.value


def run_on(thread_kind, call):
    """Runs call() on a thread of the kind; returns what the thread's current device was before and after."""
    def observed():
        if current_context() is not None:  # else the scenario would not test what it is for
            raise AssertionError("a CUDA context was current on the thread before fastsgemm's call")
        before = _sgemm.current_device()
        finish = call()
        after = _sgemm.current_device()
        finish()
        return before, after

    if thread_kind == "thread":
        result = {}
        def body():
            try:
                result["value"] = observed()
            except BaseException as e:  # noqa: BLE001: reported on the main thread
                result["error"] = e
        t = threading.Thread(target=body)
        t.start()
        t.join()
        if "error" in result:
            raise result["error"]
        return result["value"]
    if thread_kind == "pool":
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            return pool.submit(observed).result()
    if thread_kind == "dask":
        import dask

        ident = threading.get_ident()
        def task():
            if threading.get_ident() == ident:
                raise AssertionError("the task ran on the main thread, not a worker of the threaded scheduler")
            return observed()
        return dask.delayed(task)().compute(scheduler="threads")
    raise SystemExit(f"unknown thread kind {thread_kind!r}")


# The entries whose result torch allocates inside fastsgemm's call (torch.empty on the operands' device).
TORCH_ALLOCATES = {"torch_sgemm", "torch_matmul", "torch_forward"}


def torch_leaves(device):
    """The current device that torch's own allocation on `device` leaves on a new thread. Where no context of
    device 0 exists yet, torch's device guard does not switch back to it (that would create one), so an
    allocation on device 1 leaves device 1 current: fastsgemm, allocating through torch, may do what torch does."""
    import torch

    def allocate():
        torch.empty((M, N), device=torch.device("cuda", device))
        return lambda: None  # nothing to check

    before, after = run_on("thread", allocate)
    return after


def main(entry, thread_kind, device):
    device = int(device)
    if entry.startswith("autograd_"):
        if thread_kind != "autograd":
            raise SystemExit("the autograd_* entries run on torch's autograd worker: THREAD must be autograd")
        autograd(device, entry.removeprefix("autograd_"))
    else:
        allowed = {torch_leaves(device)} if entry in TORCH_ALLOCATES else set()
        before, after = run_on(thread_kind, ENTRIES[entry](device))
        if after != before and after not in allowed:
            raise AssertionError(f"the call moved its thread's current device from {before} to {after}")
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
