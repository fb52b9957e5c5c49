"""Every CUDA kernel and configuration on thin products: a small batch through a layer (a few rows), and a few
columns (a layer's backward at a small batch), where a kernel's few blocks leave most SMs idle unless K is cut.

    python benchmarks/thin_shapes.py OUT.json

fastsgemm.benchmark on each (CUDA events around each launch, uniform random device operands, warm-up, the median
of 30 runs), with cuBLAS FP32 among the rows and what kernel="auto" picked named in its key (auto=<kernel>).
Prints the twelve fastest per shape, in microseconds, and writes every figure to OUT.json.
"""
import json
import sys

import fastsgemm

SHAPES = [(1, 1024, 1024), (8, 1024, 1024), (64, 1024, 1024), (256, 1024, 1024), (64, 4096, 1024), (1024, 8, 1024)]


def main(out_path):
    names = []
    for k in fastsgemm.kernels():
        if k.device == "cpu" or k.name == "naive":  # naive: seconds at these shapes, and no contender
            continue
        names += [k.name] + [f"{k.name}:{c.name}" for c in k.configs]
    results = {"meta": {"device": fastsgemm.device_info()["name"], "unit": "us, median of 30"}, "shapes": {}}
    for m, n, k in SHAPES:
        row = {}
        for name in names + ["auto"]:
            r = fastsgemm.benchmark(name, m, n, k, repeats=30, warmup=5, check=False)
            row[name if name != "auto" else f"auto={r['picked']}"] = round(r["median_ms"] * 1e3, 1)
        results["shapes"][f"{m}x{n}x{k}"] = row
        print(f"{m}x{n}x{k}:", sorted((v, key) for key, v in row.items())[:12], flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
