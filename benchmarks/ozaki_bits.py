"""Hashes of `ozaki` and `ozaki:7` results on data that sends outputs to the double path, so that two builds can be
compared bit for bit (a change meant to move work, not bits, must leave every hash as it was).

    PYTHONPATH=build_a python benchmarks/ozaki_bits.py a.json
    PYTHONPATH=build_b python benchmarks/ozaki_bits.py b.json      # then compare the two files

The cases (torch CUDA tensors, seeded): softmax rows of 3 x normal logits as A and normal B, at 16384^3; at
2048 x 2048 x 16384 in the four layouts of A and B; and at 1024 x 1024 x 20000 (two K panels), A row- and
column-major. Each hash is the first 16 hex digits of the SHA-256 of the result's bytes. Needs torch.
"""
from __future__ import annotations

import hashlib
import json
import sys

import torch

import fastsgemm


def softmax_rows(g, m, k):
    return torch.softmax(3.0 * torch.randn(m, k, generator=g, device="cuda"), dim=1)


def col_major(x):
    return x.t().contiguous().t()


def cases():
    g = torch.Generator(device="cuda").manual_seed(5)
    yield "softmax 16384^3 NN", softmax_rows(g, 16384, 16384), torch.randn(16384, 16384, generator=g, device="cuda")
    a, b = softmax_rows(g, 2048, 16384), torch.randn(16384, 2048, generator=g, device="cuda")
    for layout in ("NN", "TN", "NT", "TT"):
        yield (f"softmax 2048x2048x16384 {layout}", col_major(a) if layout[0] == "T" else a,
               col_major(b) if layout[1] == "T" else b)
    a, b = softmax_rows(g, 1024, 20000), torch.randn(20000, 1024, generator=g, device="cuda")
    yield "softmax 1024x1024x20000 NN", a, b
    yield "softmax 1024x1024x20000 TN", col_major(a), b


def main(path):
    hashes = {}
    for name, a, b in cases():
        for kernel in ("ozaki:7", "ozaki"):
            out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda")
            fastsgemm.sgemm(a, b, out=out, kernel=kernel)
            torch.cuda.synchronize()
            hashes[f"{name} {kernel}"] = hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16]
            print(name, kernel, hashes[f"{name} {kernel}"], flush=True)
    with open(path, "w") as f:
        json.dump(hashes, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
