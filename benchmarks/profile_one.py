"""Runs one rung twice on random device inputs, for a profiler to catch the
second launch (the first warms up). Used by benchmarks/profile.sh.

    python benchmarks/profile_one.py RUNG M N K       (RUNG may name a configuration: warptile:64x64x16)

Launch order: three fills (A, B, out), then the rung twice. A call may launch
more than its GEMM kernel (the wgmma rungs' pack pass, a split-K sum):
benchmarks/profile.sh and evidence.py pick the GEMM kernel by name.
"""
import sys

from fastsgemm import _sgemm
from fastsgemm._registry import parse_kernel
from fastsgemm._benchmark import random_device_matrix
from fastsgemm._device_array import matrix_core

name, m, n, k = sys.argv[1], *(int(x) for x in sys.argv[2:5])
a = random_device_matrix(m, k, 1, 0)
b = random_device_matrix(k, n, 2, 0)
out = random_device_matrix(m, n, 3, 0)
for _ in range(2):
    _sgemm.gemm(parse_kernel(name), matrix_core(a), matrix_core(b), None, matrix_core(out), 1.0, 0.0, None)
_sgemm.synchronize(None)
