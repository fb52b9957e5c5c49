# Where a small stack's time a call goes between the kernel and the gaps around it. For one stack, each method
# (fastsgemm's auto, torch.matmul, and torch.add on the same operands: the same bytes with no products) is called
# back to back, first timed as benchmarks/batched.py times it (CUDA events around a loop), then traced with
# torch.profiler (CUPTI's kernel records): each kernel's duration on the GPU, and the gap from one kernel's end to
# the next one's start. A call's time is about its kernels' durations plus the gaps; a gap that is large says the
# GPU waits (on the host, or on a launch), a small one that the kernel itself is what to shorten. Tracing adds host
# time to each launch, and on an overlapped launch (rung 22) it can lengthen the loop and the kernel records: compare
# the traced period with the untraced one before reading the kernels' durations as the GPU's.
#     python3 benchmarks/harness/kernel_gaps.py [BATCH M K N [CALLS]]    (256 128 128 128 400)
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import fastsgemm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for batched.py's timing
from batched import STREAMING_FLOOR, time_loop, warm_up  # noqa: E402

if len(sys.argv) not in (1, 5, 6):
    sys.exit(f"usage: {sys.argv[0]} [BATCH M K N [CALLS]]")
batch, m, k, n = (int(v) for v in sys.argv[1:5]) if len(sys.argv) >= 5 else (256, 128, 128, 128)
calls = int(sys.argv[5]) if len(sys.argv) == 6 else 400
if min(batch, m, k, n) <= 0 or calls < 2:
    sys.exit("BATCH, M, K and N must be positive, and CALLS at least 2")
torch.backends.cuda.matmul.allow_tf32 = False
generator = torch.Generator(device="cuda").manual_seed(20261127)
a = torch.rand((batch, m, k), device="cuda", generator=generator) * 2 - 1
b = torch.rand((batch, k, n), device="cuda", generator=generator) * 2 - 1
out = torch.empty((batch, m, n), device="cuda")
methods = {"fastsgemm auto": lambda: fastsgemm.matmul(a, b, out=out),
           "torch.matmul": lambda: torch.matmul(a, b, out=out)}
if m == k == n:  # square products: the add reads and writes what the product does
    methods[STREAMING_FLOOR] = lambda: torch.add(a, b, out=out)

print(f"{batch} x {m} x {k} x {n}, {calls} calls a loop; {torch.cuda.get_device_name()}")
print("Per call, us: the untraced loop, the traced loop; then the median kernel record and gap to the next")
print(f"{'method':28s} {'untraced':>9s} {'traced':>9s} {'kernels':>8s} {'kernel us':>10s} {'gap us':>8s}  kernel")
for name, call in methods.items():
    warm_up(call, 0.5)
    untraced_us = time_loop(call, calls) * 1e3
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = sorted((e for e in trace.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and e.time_range.end > e.time_range.start and "memcpy" not in e.name.lower()
                      and "memset" not in e.name.lower()), key=lambda e: e.time_range.start)
    if len(kernels) != calls:  # one kernel a call, or the medians below would mix kernels of different kinds
        print(f"{name:28s} {untraced_us:9.1f}  (the trace holds {len(kernels)} kernels for {calls} calls: "
              f"not one a call, not split)")
        continue
    durations = [e.time_range.end - e.time_range.start for e in kernels]
    gaps = [after.time_range.start - before.time_range.end for before, after in zip(kernels, kernels[1:])]
    period = (kernels[-1].time_range.start - kernels[0].time_range.start) / (len(kernels) - 1)  # the traced loop
    print(f"{name:28s} {untraced_us:9.1f} {period:9.1f} {len(kernels):8d} {statistics.median(durations):10.1f} "
          f"{statistics.median(gaps):8.1f}  {kernels[0].name[:60]}")
