# tf32_tma (rung 23) and tf32 (rung 19) against cuBLAS's TF32 GEMM (torch.matmul with TF32 allowed, and
# fsg:cublas_tf32, cuBLAS as fastsgemm's kernel="cublas_tf32" calls it, as the sweep does) in the four
# layouts of torch operands: NN (A and B row-major), NT (B a transposed view: k contiguous), TN (A a transposed
# view), TT. CUDA events, fresh randn operands, 3 warm-ups each, then 20 rounds in which each contender runs once in
# turn (a clock that drifts with the GPU's temperature weighs on all alike); each one's median of 20, as TFLOP/s and
# as a ratio to cuBLAS TF32. TN has no k-contiguous operand, so rung 23 runs rung 19 there (its numbers, packed).
#     python3 benchmarks/harness/tf32_layouts.py [sizes...]
import statistics
import sys

import torch

import fastsgemm

torch.backends.cuda.matmul.allow_tf32 = True


def time_ms(call):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def medians_ms(calls, rounds=20):
    for call in calls.values():
        for _ in range(3):
            call()
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(time_ms(call))
    return {name: statistics.median(t) for name, t in times.items()}


for size in [int(s) for s in sys.argv[1:]] or [4096, 8192, 16384]:
    for layout in ("NN", "NT", "TN", "TT"):
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        a = a.t() if layout[0] == "T" else a
        b = b.t() if layout[1] == "T" else b
        out = torch.empty(size, size, device="cuda")
        calls = {"cublas_tf32": lambda: torch.matmul(a, b, out=out)}
        for kernel in ("tf32_tma", "tf32", "cublas_tf32"):  # the last: cuBLAS as fastsgemm calls it (the sweep's)
            calls[kernel if kernel != "cublas_tf32" else "fsg:cublas_tf32"] = \
                lambda kernel=kernel: fastsgemm.matmul(a, b, out=out, kernel=kernel)
        times = medians_ms(calls)
        flops = 2 * size**3
        cells = [f"{name}={flops / ms / 1e9:.0f}({times['cublas_tf32'] / ms:.3f}x)" for name, ms in times.items()]
        print(f"{size} {layout} " + " ".join(cells), flush=True)
        del a, b, out
