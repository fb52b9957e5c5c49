# What clock does the GPU give a kernel under sustained load, and at what power? Each contender is called back to
# back on one square shape for a number of seconds (torch operands, a synchronize every 4 calls) while
# nvidia-smi samples this GPU's SM clock, board power, power limit and throttle reasons every 200 ms. The
# summary takes the samples drawing more than 60% of the limit (under load). Reason 0x4 is the software power
# cap. The contenders run one after another with no pause, so each later one starts on a warmer board: run
# them in both orders to see how much that moves. (fastsgemm falls back where a kernel cannot run, ozaki to
# tf32x3 where INT8 wgmma is not had: the call times say which ran.)
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
if seconds <= 0:
    sys.exit("SECONDS must be positive")
QUERY = "timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active"


def this_gpu():
    """nvidia-smi's name for the GPU torch uses (CUDA_VISIBLE_DEVICES renumbers devices, so not its index):
    its PCI address, or None where torch does not say it (then nvidia-smi samples every GPU)."""
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    if all(hasattr(p, f) for f in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    return None


def parse(line):
    """(clock MHz, power W, limit W, the line's fields), or None for a line that is not six numbers' worth."""
    fields = [f.strip() for f in line.split(",")]
    try:
        return float(fields[1].split()[0]), float(fields[2].split()[0]), float(fields[3].split()[0]), fields
    except (IndexError, ValueError):
        return None


generator = torch.Generator(device="cuda").manual_seed(0)
a = torch.rand((size, size), device="cuda", generator=generator) * 2 - 1
b = torch.rand((size, size), device="cuda", generator=generator) * 2 - 1
out = torch.empty((size, size), device="cuda")
gpu = this_gpu()
print(f"sampling GPU {gpu}" if gpu is not None else "sampling every GPU (torch gives no PCI address)")

for kernel in kernels:
    fastsgemm.sgemm(a, b, out=out, kernel=kernel)
    torch.cuda.synchronize()
    which = ["-i", gpu] if gpu is not None else []
    sampler = subprocess.Popen(["nvidia-smi", *which, f"--query-gpu={QUERY}", "--format=csv,noheader", "-lms", "200"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            fastsgemm.sgemm(a, b, out=out, kernel=kernel)
            calls += 1
            if calls % 4 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    finally:
        sampler.terminate()
    lines = [line for line in sampler.communicate()[0].splitlines() if line.strip()]
    samples = [s for s in map(parse, lines) if s is not None]
    loaded = [s for s in samples if s[1] > 0.6 * s[2]]
    print(f"{kernel} {size}^3: {calls} calls in {elapsed:.2f} s, {elapsed / calls * 1e3:.2f} ms a call, "
          f"{2 * size**3 * calls / elapsed / 1e12:.1f} TFLOP/s")
    if loaded:
        clocks = sorted(s[0] for s in loaded)
        print(f"  {len(loaded)} samples under load: SM clock median {statistics.median(clocks):.0f} MHz "
              f"({clocks[len(clocks) // 10]:.0f}-{clocks[len(clocks) * 9 // 10]:.0f} from the 10th to the 90th "
              f"percentile), power median {statistics.median(s[1] for s in loaded):.1f} W of {loaded[0][2]:.0f} W, "
              f"throttle reasons {sorted(set(s[3][5] for s in loaded if len(s[3]) > 5))}")
    else:
        print(f"  no sample drew 60% of the power limit ({len(samples)} samples of {len(lines)} lines)")
    for line in lines:
        print("   ", line)
