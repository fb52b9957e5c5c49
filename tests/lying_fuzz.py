"""Fuzz: random __cuda_array_interface__ and DLPack descriptions over one real device allocation, valid and
invalid, as A, B or out of an sgemm. Run as a script (tests/test_lying_device.py runs it in a subprocess, and
under compute-sanitizer memcheck):

    python tests/lying_fuzz.py [--examples N] [--seed S]

Every description's pointer lies inside the allocation; its shape and strides may reach outside it. The
property, for each description: the call returns the float64-correct result, or raises TypeError or
ValueError; either way no byte outside the view's own elements changes, in the allocation or in the guard
allocations made before and after it, and the CUDA context still works at the end. A description is valid when
its pointer is 4-byte aligned, every element it names lies in the allocation, and (for out) no two elements share
memory; then the call must succeed. Prints "lying fuzz: N examples, V valid, 0 failures" at the end.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fastsgemm  # noqa: E402
from fastsgemm import DeviceArray, _sgemm  # noqa: E402
from fastsgemm._device_array import matrix_core  # noqa: E402
from fastsgemm.testing import current_device  # noqa: E402
from lying import DLPackProducer, ForgedTensor, cai  # noqa: E402

FLOATS = 4096  # the allocation every description is about: 16 KiB
GUARD = 1024
KERNELS = ["auto", "naive", "smem", "warptile", "tf32x3", "cublas"]  # FP32-accurate: one tolerance for all


def device_array_over(buffer, count):
    return DeviceArray(buffer, (1, count))


def fill(buffer, count, values):
    _sgemm.copy(matrix_core(device_array_over(buffer, count)), values.reshape(1, count), None)


def read(buffer, count):
    return device_array_over(buffer, count).numpy().reshape(count)


def elements(offset, shape, strides):
    """Element offsets (in floats, from the allocation's start) a view names."""
    rows, cols = shape
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return offset + i * strides[0] + j * strides[1]


view = st.fixed_dictionaries({
    "role": st.sampled_from(["A", "B", "out"]),
    "interface": st.sampled_from(["cai", "dlpack"]),
    "rows": st.integers(0, 9),
    "cols": st.integers(0, 9),
    "inner": st.integers(0, 9),  # the other dimension of the product
    "row_stride": st.one_of(st.integers(-20, 20), st.integers(-5000, 5000)),
    "col_stride": st.one_of(st.integers(-20, 20), st.integers(-5000, 5000)),
    # The pointer is always inside the allocation (a pointer elsewhere belongs to another allocation, which
    # the view may then use); the shape and strides are what may lie, reaching before or past it.
    "offset": st.one_of(st.integers(0, FLOATS - 1), st.integers(0, 20), st.integers(FLOATS - 20, FLOATS - 1)),
    "misaligned_by": st.sampled_from([0] * 9 + [1, 2, 3]),  # bytes
    "kernel": st.sampled_from(KERNELS),
})


class Fuzz:
    def __init__(self):
        self.rng = np.random.default_rng(7)
        self.before = _sgemm.DeviceBuffer(GUARD * 4, current_device())
        self.memory = _sgemm.DeviceBuffer(FLOATS * 4, current_device())
        self.after = _sgemm.DeviceBuffer(GUARD * 4, current_device())
        self.guard_values = self.rng.standard_normal(GUARD, dtype=np.float32)
        for guard in (self.before, self.after):
            fill(guard, GUARD, self.guard_values)
        self.examples = self.valid = 0
        self.forged = []
        self.failures = []

    def describe(self, v, shape):
        ptr = self.memory.ptr + v["offset"] * 4 + v["misaligned_by"]
        strides = (v["row_stride"], v["col_stride"])
        if v["interface"] == "cai":
            return cai(ptr, shape, (strides[0] * 4, strides[1] * 4)), None
        tensor = ForgedTensor(ptr, shape, strides, device_id=current_device())
        # A producer keeps its tensor alive until the deleter runs, which may be after the call returns (when
        # the last reference to the holder goes): this one lives as long as the fuzz.
        self.forged.append(tensor)
        return DLPackProducer(tensor, (2, current_device())), tensor

    def run(self, v):
        self.examples += 1
        contents = self.rng.standard_normal(FLOATS, dtype=np.float32)
        fill(self.memory, FLOATS, contents)
        m, n, k = {"A": (v["rows"], v["inner"], v["cols"]), "B": (v["inner"], v["cols"], v["rows"]),
                   "out": (v["rows"], v["cols"], v["inner"])}[v["role"]]
        shape = {"A": (m, k), "B": (k, n), "out": (m, n)}[v["role"]]
        strides = (v["row_stride"], v["col_stride"])
        offsets = elements(v["offset"], shape, strides)
        empty = offsets.size == 0
        inside = empty or (offsets.min() >= 0 and offsets.max() < FLOATS)
        distinct = v["role"] != "out" or len(np.unique(offsets)) == offsets.size
        valid = (v["misaligned_by"] == 0 or empty) and inside and distinct

        lying, _ = self.describe(v, shape)
        operands = {"A": self.rng.standard_normal((m, k), dtype=np.float32),
                    "B": self.rng.standard_normal((k, n), dtype=np.float32)}
        if v["role"] in operands and inside and not empty:
            operands[v["role"]] = contents[offsets]  # what the view holds
        args = {name: DeviceArray.from_numpy(value) for name, value in operands.items()}
        if v["role"] in ("A", "B"):
            args[v["role"]] = lying
        out = lying if v["role"] == "out" else None
        try:
            result = fastsgemm.sgemm(args["A"], args["B"], out=out, kernel=v["kernel"])
            _sgemm.synchronize(None)
            outcome = None
        except (TypeError, ValueError) as error:
            outcome = error
        after = read(self.memory, FLOATS)
        problem = None
        if valid and outcome is not None:
            problem = f"a valid description was refused: {outcome!r}"
        elif not valid and outcome is None:
            problem = "an invalid description was accepted"
        elif valid:
            self.valid += 1
            expected = operands["A"].astype(np.float64) @ operands["B"].astype(np.float64)
            got = after[offsets] if v["role"] == "out" else result.numpy()
            scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
            if not np.allclose(got, expected, rtol=1e-4, atol=1e-4 * scale):
                problem = f"wrong result: max error {np.abs(got - expected).max()}"
        changed = after != contents
        if v["role"] == "out" and valid and not empty:
            changed[offsets.ravel()] = False  # the view's own elements were meant to change
        if problem is None and changed.any():
            problem = f"{int(changed.sum())} bytes of the allocation outside the view changed"
        for guard in (self.before, self.after):
            if problem is None and not np.array_equal(read(guard, GUARD), self.guard_values):
                problem = "a guard allocation changed"
        if problem is not None:
            self.failures.append((problem, v))
            print(f"FAILURE {len(self.failures)}: {problem}: {v}", flush=True)
            for guard in (self.before, self.after):  # so that the next example starts clean
                fill(guard, GUARD, self.guard_values)
            raise AssertionError(f"{problem}: {v}")

    def context_still_works(self):
        a, b = self.rng.standard_normal((33, 17), dtype=np.float32), self.rng.standard_normal((17, 9), dtype=np.float32)
        got = fastsgemm.sgemm(DeviceArray.from_numpy(a), DeviceArray.from_numpy(b)).numpy()
        return np.allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=400)
    parser.add_argument("--seed", type=int, default=20261122)
    options = parser.parse_args()
    fuzz = Fuzz()

    @seed(options.seed)
    @settings(max_examples=options.examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(view)
    def property_holds(v):
        fuzz.run(v)

    try:
        property_holds()
    finally:
        works = fuzz.context_still_works()
        print(f"lying fuzz: {fuzz.examples} examples, {fuzz.valid} valid, {len(fuzz.failures)} failures, "
              f"context {'works' if works else 'LOST'}")
    return 0 if works and not fuzz.failures else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Skip interpreter teardown: it would free the forged tensors in no particular order relative to the DLPack
    # holders still referenced from hypothesis's saved tracebacks, and run their Python deleters too late.
    os._exit(code)
