"""Runs one rung twice on random device inputs, for a profiler to catch the
second launch (the first warms up). Used by benchmarks/profile.sh.

    python benchmarks/profile_one.py RUNG M N K       (RUNG may name a configuration: warptile:64x64x16)

Launch order: three fills (A, B, out), then the rung twice. A call may launch
more than its GEMM kernel (the wgmma rungs' pack pass, a split-K sum):
benchmarks/profile.sh and evidence.py pick the GEMM kernel by name.
"""
import sys

import fastsgemm
from fastsgemm.testing import random_device_matrix

name, m, n, k = sys.argv[1], *(int(x) for x in sys.argv[2:5])
a = random_device_matrix(m, k, seed=1)
b = random_device_matrix(k, n, seed=2)
out = random_device_matrix(m, n, seed=3)
for _ in range(2):  # DeviceArrays: one launch each (and the kernel's own passes), on the legacy stream
    fastsgemm.sgemm(a, b, out=out, kernel=name)
out.numpy()  # waits for both
