# tf32_tma (rung 20) and tf32 (rung 14) against cuBLAS's TF32 GEMM (torch.matmul with TF32 allowed) in the four
# layouts of torch operands: NN (A and B row-major), NT (B a transposed view: k contiguous), TN (A a transposed
# view), TT. CUDA events, median of 20 after 3 warm-ups, fresh randn operands; TFLOP/s and the ratio to cuBLAS TF32
# in the same run. TN has no k-contiguous operand, so rung 20 runs rung 14 there (its numbers, packed).
#     python3 benchmarks/harness/tf32_layouts.py [sizes...]
import statistics
import sys

import torch

import fastsgemm

torch.backends.cuda.matmul.allow_tf32 = True


def median_ms(call):
    for _ in range(3):
        call()
    times = []
    for _ in range(20):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


for size in [int(s) for s in sys.argv[1:]] or [4096, 8192, 16384]:
    for layout in ("NN", "NT", "TN", "TT"):
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        a = a.t() if layout[0] == "T" else a
        b = b.t() if layout[1] == "T" else b
        out = torch.empty(size, size, device="cuda")
        calls = {"cublas_tf32": lambda: torch.matmul(a, b, out=out)}
        for kernel in ("tf32_tma", "tf32"):
            calls[kernel] = lambda kernel=kernel: fastsgemm.matmul(a, b, out=out, kernel=kernel)
        times = {name: median_ms(call) for name, call in calls.items()}
        flops = 2 * size**3
        cells = [f"{name}={flops / ms / 1e9:.0f}({times['cublas_tf32'] / ms:.3f}x)" for name, ms in times.items()]
        print(f"{size} {layout} " + " ".join(cells), flush=True)
        del a, b, out
