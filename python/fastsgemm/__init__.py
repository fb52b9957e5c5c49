"""fastsgemm: a ladder of hand-written CUDA SGEMM kernels behind one call.

    import numpy as np, fastsgemm
    A = np.random.rand(1024, 512).astype(np.float32)
    B = np.random.rand(512, 256).astype(np.float32)
    C = fastsgemm.sgemm(A, B, kernel="naive")      # NumPy in, NumPy out
    D = fastsgemm.matmul(stack_of_As, B)            # numpy.matmul's semantics: stacks, broadcasting, 1-D

PyTorch models: `import fastsgemm.torch` for a differentiable operator and a drop-in torch.nn.Linear (import
fastsgemm alone never imports torch). fastsgemm.kernels() lists the rungs; fastsgemm.KERNELS their names; kernel="auto" (the default) runs
the FP32-accurate kernel measured fastest for the shape on this GPU (fastsgemm.auto_kernel).
"""
from ._api import CudaError, auto_kernel, auto_reason, cuda_available, device_count, device_info, sgemm, sgemm_raw
from ._registry import KERNELS, KernelConfig, KernelInfo, kernels
import atexit as _atexit
import os as _os

from . import _sgemm
from ._benchmark import benchmark
from ._cuda_setup import DriverTooOldWarning, check_at_import as _check_cuda_at_import
from ._device_array import DeviceArray, to_device
from ._matmul import matmul
from ._memory import device_memory, reset_device_memory_peak, set_device_memory_limit
from ._memory import limit_from_environment as _limit_from_environment

__version__ = "0.1.0"

# Where the nvidia-cublas wheel keeps cuBLAS, for its first use; one warning if the driver is too old for this build.
_check_cuda_at_import()

# FASTSGEMM_DEVICE_MEMORY_LIMIT caps the device memory fastsgemm holds on every GPU (fastsgemm.set_device_memory_limit).
_limit_from_environment()

# Threads free their cuBLAS handles when they end; the main thread never "ends", so it frees its own here.
_atexit.register(_sgemm.release_thread_resources)


# A child forked after CUDA was initialized (os.fork, multiprocessing's "fork" method) cannot use CUDA: there every
# fastsgemm call that would touch the GPU raises CudaError saying so and what to do, instead of hanging or crashing.
# Whether CUDA was initialized is asked in the parent just before the fork, without initializing anything.
def _before_fork():
    global _cuda_before_fork
    _cuda_before_fork = _sgemm.cuda_initialized()


def _after_fork_in_child():
    if _cuda_before_fork:
        _sgemm.mark_forked()


_cuda_before_fork = False
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)

__all__ = [
    "KERNELS",
    "CudaError",
    "DeviceArray",
    "DriverTooOldWarning",
    "KernelConfig",
    "KernelInfo",
    "auto_kernel",
    "auto_reason",
    "benchmark",
    "cuda_available",
    "device_count",
    "device_info",
    "device_memory",
    "kernels",
    "matmul",
    "reset_device_memory_peak",
    "set_device_memory_limit",
    "sgemm",
    "sgemm_raw",
    "to_device",
]
