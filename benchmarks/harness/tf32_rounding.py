# Does cuBLAS's TF32 GEMM round its operands to nearest, or let the tensor cores truncate them, and which kernel
# runs? For each shape and torch layout: the relative Frobenius error of torch.matmul with TF32 allowed (and of
# fastsgemm's tf32, NN only) against three float64 references: the exact product, the product of the operands
# rounded to TF32 to nearest even, and that of the operands truncated to TF32. The reference it matches to FP32
# summation (1e-6 to 1e-5) is what it does. Kernel names from the torch profiler.
#     python3 benchmarks/harness/tf32_rounding.py
import torch
from torch.profiler import ProfilerActivity, profile

import fastsgemm

torch.backends.cuda.matmul.allow_tf32 = True


def rounded(x):
    """x rounded to TF32, to nearest with ties to even, as FP32 bits."""
    bits = x.view(torch.int32)
    return ((bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32)


def truncated(x):
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def error(c, reference):
    return ((c.double() - reference).norm() / reference.norm()).item()


generator = torch.Generator(device="cuda").manual_seed(1)
for m, n, k in [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 2048)]:
    for layout in ("NN", "NT", "TN", "TT"):
        a = torch.randn(m, k, device="cuda", generator=generator)
        b = torch.randn(k, n, device="cuda", generator=generator)
        a = a.t().contiguous().t() if layout[0] == "T" else a  # the same values, column-major
        b = b.t().contiguous().t() if layout[1] == "T" else b
        exact = a.double() @ b.double()
        of_rounded = rounded(a.contiguous()).double() @ rounded(b.contiguous()).double()
        of_truncated = truncated(a.contiguous()).double() @ truncated(b.contiguous()).double()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            c = a @ b
            torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if e.device_type.name == "CUDA" and "Memset" not in e.name]
        print(f"{m}x{n}x{k} {layout} cublas_tf32: exact {error(c, exact):.3e} rounded {error(c, of_rounded):.3e} "
              f"truncated {error(c, of_truncated):.3e} kernel {kernels[:1]}", flush=True)
        if layout == "NN":
            mine = fastsgemm.matmul(a, b, kernel="tf32")
            print(f"   fastsgemm tf32: exact {error(mine, exact):.3e} rounded {error(mine, of_rounded):.3e} "
                  f"truncated {error(mine, of_truncated):.3e}", flush=True)
        del exact, of_rounded, of_truncated
