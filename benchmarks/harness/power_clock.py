# What clock does the GPU give a kernel under sustained load, and at what power? Each contender is called back to
# back on one square shape for a number of seconds (torch operands, a synchronize every 4 calls) while
# nvidia-smi samples the SM clock, the board's power, its limit and the throttle reasons every 200 ms. The
# summary takes the samples drawing more than 400 W (under load). Reason 0x4 is the software power cap.
#     python3 benchmarks/harness/power_clock.py [SIZE] [SECONDS] [KERNEL ...]    (16384 12 ozaki cublas)
import statistics
import subprocess
import sys
import time

import torch

import fastsgemm

size = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 12.0
kernels = sys.argv[3:] or ["ozaki", "cublas"]
QUERY = "timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active"

generator = torch.Generator(device="cuda").manual_seed(0)
a = torch.rand((size, size), device="cuda", generator=generator) * 2 - 1
b = torch.rand((size, size), device="cuda", generator=generator) * 2 - 1
out = torch.empty((size, size), device="cuda")

for kernel in kernels:
    fastsgemm.sgemm(a, b, out=out, kernel=kernel)
    torch.cuda.synchronize()
    sampler = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader", "-lms", "200"],
                               stdout=subprocess.PIPE, text=True)
    start, calls = time.time(), 0
    while time.time() - start < seconds:
        fastsgemm.sgemm(a, b, out=out, kernel=kernel)
        calls += 1
        if calls % 4 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    elapsed = time.time() - start
    sampler.terminate()
    samples = [line.split(", ") for line in sampler.communicate()[0].splitlines() if line.strip()]
    loaded = [s for s in samples if float(s[2].split()[0]) > 400]
    clocks = sorted(float(s[1].split()[0]) for s in loaded)
    watts = [float(s[2].split()[0]) for s in loaded]
    print(f"{kernel} {size}^3: {calls} calls in {elapsed:.2f} s, {elapsed / calls * 1e3:.2f} ms a call, "
          f"{2 * size**3 * calls / elapsed / 1e12:.1f} TFLOP/s")
    if loaded:
        print(f"  {len(loaded)} samples under load: SM clock median {statistics.median(clocks):.0f} MHz "
              f"({clocks[len(clocks) // 10]:.0f}-{clocks[len(clocks) * 9 // 10]:.0f} from the 10th to the 90th "
              f"percentile), power median {statistics.median(watts):.1f} W of {loaded[0][3]}, "
              f"throttle reasons {sorted(set(s[5] for s in loaded))}")
    for s in samples:
        print("   ", ", ".join(s))
