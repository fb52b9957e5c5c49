"""How a child forked after CUDA work exits through the interpreter's ordinary teardown (sys.exit), by what the
parent did first. Prints the child's wait status (0: a clean exit; 11 in the low byte: SIGSEGV).

    for v in torch_only torch_init numpy_warptile torch_warptile; do python3 -W ignore benchmarks/fork_exit.py $v; done
"""
import os
import sys

variant = sys.argv[1]
if variant != "torch_only":
    import numpy as np

    import fastsgemm
import torch

if variant in ("torch_only", "torch_init"):
    torch.ones(4, device="cuda").sum().item()
elif variant == "numpy_warptile":  # host operands: staged through pinned buffers
    a = np.ones((64, 32), np.float32)
    fastsgemm.sgemm(a, a.T, kernel="warptile")
elif variant == "torch_warptile":  # device operands: no staging
    t = torch.ones(64, 32, device="cuda")
    fastsgemm.sgemm(t, t.T, kernel="warptile")
    torch.cuda.synchronize()
else:
    raise SystemExit(f"unknown variant {variant!r}")
pid = os.fork()
if pid == 0:
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print(variant, "child status", status)
