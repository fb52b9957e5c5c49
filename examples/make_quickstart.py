"""Writes examples/quickstart.ipynb from the cells below, without outputs (run it, then execute the notebook
where its outputs should come from: `jupyter nbconvert --to notebook --execute --inplace
examples/quickstart.ipynb`, or tests/test_notebook.py's way with nbclient). The committed notebook carries the
outputs of one such run on an H100, so that a reader sees what each cell prints before running it.

    python examples/make_quickstart.py
"""
from pathlib import Path

import nbformat

CELLS = [
    ("markdown", """# fastsgemm in a notebook

fastsgemm multiplies float32 matrices on the GPU with one call, from NumPy, CuPy or PyTorch, and
keeps a ladder of hand-written kernels you can run one by one. This notebook runs anywhere: on a
machine without a GPU the GPU cells say so and skip, and the `cpu` rung does the work."""),
    ("code", """import numpy as np
import fastsgemm

GPU = fastsgemm.cuda_available()
if GPU:
    info = fastsgemm.device_info()
    print(f"GPU: {info['name']}, {info['sm_count']} SMs, FP32 peak {info['fp32_peak_gflops'] / 1000:.1f} TFLOP/s")
else:
    print("no usable GPU here: the cells below that need one say so and skip")"""),
    ("markdown", """## NumPy in, NumPy out

`fastsgemm.sgemm(A, B)` returns `A @ B` as a NumPy array when A and B are NumPy arrays. The
data goes to the GPU and back inside the call. `kernel="auto"`, the default, picks the fastest
FP32-accurate kernel for the shape (without a GPU: the `cpu` rung, with one warning)."""),
    ("code", """rng = np.random.default_rng(0)
A = rng.standard_normal((512, 256), dtype=np.float32)
B = rng.standard_normal((256, 384), dtype=np.float32)

C = fastsgemm.sgemm(A, B)
exact = A.astype(np.float64) @ B.astype(np.float64)
print(type(C).__name__, C.shape, C.dtype)
print("relative error against float64:", np.linalg.norm(C - exact) / np.linalg.norm(exact))"""),
    ("markdown", """BLAS's update works too: `alpha * A @ B + beta * C`, in place with `out=`."""),
    ("code", """D = rng.standard_normal((512, 384), dtype=np.float32)
before = D.copy()
fastsgemm.sgemm(A, B, D, alpha=0.5, beta=2.0, out=D)
print("matches 0.5 A B + 2 D:", np.allclose(D, 0.5 * exact + 2.0 * before, rtol=1e-4, atol=1e-4))"""),
    ("markdown", """## PyTorch tensors

Tensors on the GPU in, a tensor out, on torch's current stream, with no copies.
`fastsgemm.torch.Linear` is a drop-in `torch.nn.Linear` whose products run on fastsgemm."""),
    ("code", """try:
    import torch
except ImportError:
    torch = None

if not GPU or torch is None or not torch.cuda.is_available():
    print("skipped: needs a GPU and PyTorch with CUDA")
else:
    import fastsgemm.torch as fst

    a = torch.randn(1000, 3000, device="cuda")
    b = torch.randn(3000, 2000, device="cuda")
    c = fastsgemm.sgemm(a, b)
    print(type(c).__name__, tuple(c.shape), c.device)

    layer = fst.Linear(1024, 512, device="cuda")
    y = layer(torch.randn(64, 1024, device="cuda"))
    y.square().mean().backward()
    print("Linear:", tuple(y.shape), "weight gradient", tuple(layer.weight.grad.shape))"""),
    ("markdown", """## The ladder against cuBLAS

Each rung adds one idea to the one before it. `fastsgemm.benchmark` times a kernel with CUDA
events (the median of several runs, after warm-ups, on random data) and checks its result."""),
    ("code", """ladder = [k.name for k in fastsgemm.kernels() if k.device == "cuda" and k.rung is not None]
sizes = [256, 512, 1024, 2048]

if not GPU:
    cpu = fastsgemm.benchmark("cpu", 256, 256, 256, repeats=5)
    print(f"skipped: the CUDA rungs need a GPU. The cpu rung at 256^3: {cpu['gflops']:.1f} GFLOP/s")
else:
    results = {name: [fastsgemm.benchmark(name, n, n, n, repeats=10)["gflops"] for n in sizes]
               for name in ["cublas", *ladder]}
    for name, row in results.items():
        print(f"{name:<16}" + "".join(f"{g:>10.0f}" for g in row) + "  GFLOP/s")"""),
    ("code", """try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

if not GPU or plt is None:
    print("skipped: the plot needs a GPU and matplotlib")
else:
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, row in results.items():
        ax.plot(sizes, row, marker="o", label=name, linewidth=2.5 if name == "cublas" else 1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"The ladder on {info['name']}")
    ax.legend(fontsize=7, ncol=2)
    plt.show()"""),
    ("markdown", """## What `auto` runs, and why

`auto` runs the FP32-accurate kernel measured fastest at the nearest shape in the tuning table for
this GPU (`python -m fastsgemm.tune` measures a GPU the table lacks)."""),
    ("code", """for n in [64, 512, 2048, 8192]:
    print(f"{n}^3: {fastsgemm.auto_kernel(n, n, n)}: {fastsgemm.auto_reason(n, n, n)}")"""),
    ("markdown", """## Next

- `kernels/ladder/README.md`: the ladder rung by rung, each idea and the counter that proves it.
- `docs/guide.md`: the whole API, CuPy, several GPUs, Dask and PyTorch models.
- `python -m fastsgemm.bench --quick`: time the kernels against cuBLAS over sizes."""),
]


def build():
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
                      for kind, text in CELLS]
    return notebook


if __name__ == "__main__":
    nbformat.write(build(), Path(__file__).with_name("quickstart.ipynb"))
