"""One-off diagnostics on the GPU: are benchmark inputs random, does the
benchmark's cuBLAS check see a real difference. Prints what it finds."""
import numpy as np

import fastsgemm
from fastsgemm.testing import random_device_matrix

a = random_device_matrix(256, 256, seed=1).numpy()
print("fill: min %.4f max %.4f mean %.4f zeros %d" % (a.min(), a.max(), a.mean(), (a == 0).sum()))
for name in ("naive", "tile2d", "vectorized"):
    r = fastsgemm.benchmark(name, 512, 512, 512, repeats=3)
    print(name, "rel_error vs cublas:", r["rel_error"])
A = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
x = fastsgemm.sgemm(A, A, kernel="naive"); y = fastsgemm.sgemm(A, A, kernel="cublas")
print("host path naive vs cublas max diff:", np.abs(x - y).max())
