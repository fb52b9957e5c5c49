"""kernel="auto" and the tuning table behind it (fastsgemm._tuning, python -m fastsgemm.tune).

The table logic runs everywhere; what auto runs on this GPU, and that it runs it, needs one.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fastsgemm
import fastsgemm.testing
from fastsgemm import _tuning
from conftest import random_matrix, reference, assert_close

ENTRIES = [
    (128, 128, 128, "cublas"),
    (4096, 4096, 4096, "tf32x3"),
    (4095, 4097, 4093, "warptile"),
    (1024, 1024, 1024, "warptile:64x64x16"),
]


@pytest.mark.parametrize("shape,expected", [
    ((4096, 4096, 4096), "tf32x3"),           # a measured shape takes its own choice
    ((4100, 4000, 4200), "tf32x3"),           # nearby, all multiples of 4
    ((4095, 4097, 4093), "warptile"),
    ((4001, 4003, 4005), "warptile"),         # not multiples of 4: the odd measured shape, not 4096^3
    ((1000, 1000, 1000), "warptile:64x64x16"),  # multiples of 4, nearest in orders of magnitude
    ((100, 90, 130), "cublas"),
    ((1, 1, 1), "cublas"),
    ((0, 7, 7), "cublas"),                    # empty dimensions do not break the distance
])
def test_pick_takes_the_nearest_measured_shape(shape, expected):
    assert _tuning.pick(ENTRIES, *shape) == expected


def test_pick_falls_back_to_cublas():
    assert _tuning.pick([], 4096, 4096, 4096) == "cublas"
    too_tall = max(c.max_dim for k in fastsgemm.kernels() for c in k.configs if k.name == "warptile") + 1
    assert _tuning.pick([(too_tall, 64, 64, "warptile:64x64x16")], too_tall, 64, 64) == "cublas"


def test_read_table(tmp_path):
    assert _tuning.read_table(tmp_path / "absent.json") == {"format": 1, "devices": {}}
    for text in ("not json", "[]", '{"format": 99, "devices": {}}', '{"format": 1}'):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ValueError, match="bad.json"):
            _tuning.read_table(tmp_path / "bad.json")


def test_choice_gives_cublas_only_a_clear_win():
    """cuBLAS's host time per call is not in the kernel timings, so it must be more than CUBLAS_MARGIN faster."""
    from fastsgemm.tune import CUBLAS_HOST_BOUND_MS, CUBLAS_MARGIN, choose
    small = CUBLAS_HOST_BOUND_MS / 2  # a kernel time at which cuBLAS's host time matters
    assert choose({"cublas": small, "tf32x3": small * 1.04, "smem": small * 2}) == "tf32x3"
    assert choose({"cublas": small, "tf32x3": small * CUBLAS_MARGIN * 1.01}) == "cublas"
    assert choose({"cublas": small, "tf32x3": small * 0.9, "warptile": small * 0.95}) == "tf32x3"
    assert choose({"cublas": small}) == "cublas"
    large = CUBLAS_HOST_BOUND_MS * 2  # past it, the fastest kernel wins
    assert choose({"cublas": large, "tf32x3": large * 1.04}) == "cublas"


def test_shipped_table_is_sound():
    """Every entry names a kernel auto may run (FP32-accurate, CUDA, built), its choice is what
    fastsgemm.tune.choose makes of its own measurements with cuBLAS among them, and looking its shape up gives
    that choice back (a stack's, looked up as a stack of its count: every kernel timed there runs a stack in one
    launch)."""
    from fastsgemm.tune import choose
    table = _tuning.read_table(_tuning.SHIPPED_TABLE)
    known = fastsgemm._registry.auto_candidates()
    one_launch = fastsgemm._registry.batched_candidates()
    assert "tf32" not in known and "cublas_tf32" not in known and "cublas" in known
    for name, device in table["devices"].items():
        assert len(device["compute_capability"]) == 2, name
        entries = [(s["M"], s["N"], s["K"], s["kernel"], _tuning._fastest_first(s["median_ms"], one_launch),
                    s.get("count", 1)) for s in device["shapes"]]
        assert entries, name
        for shape, entry in zip(device["shapes"], entries):
            times = shape["median_ms"]
            assert set(times) <= set(known) and "cublas" in times, (name, shape)
            assert shape["kernel"] == choose(times), (name, shape)
            if entry[5] > 1:
                assert set(times) <= one_launch, (name, shape)
                assert _tuning.pick_batched(entries, *entry[:3], entry[5]) == shape["kernel"], (name, shape)
            else:
                assert _tuning.pick(entries, *entry[:3]) == shape["kernel"], (name, shape)


def test_a_broken_table_warns_and_auto_runs_cublas(tmp_path):
    """FASTSGEMM_TUNING names another table; an unreadable one is reported once, and auto runs cuBLAS."""
    (tmp_path / "broken.json").write_text("{")
    script = ("import warnings, fastsgemm\n"
              "from fastsgemm import _tuning\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              "    print(len(_tuning.tuned_devices()), len(caught), caught[0].message if caught else '')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FASTSGEMM_TUNING=str(tmp_path / "broken.json")))
    assert done.returncode == 0, done.stderr
    count, warned, message = done.stdout.split(" ", 2)
    assert (count, warned) == ("0", "1") and "broken.json" in message and "cublas" in message


# ---- on the GPU ----


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (130, 67, 257), (1000, 1000, 1000), (2048, 2048, 512)])
def test_auto_runs_what_auto_kernel_names(shape, rng):
    m, n, k = shape
    chosen = fastsgemm.auto_kernel(m, n, k)
    assert chosen in fastsgemm._registry.auto_candidates()
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    result = fastsgemm.sgemm(A, B)
    assert_close(result, reference(A, B), what=f"auto ({chosen}) at {shape}")
    np.testing.assert_array_equal(result, fastsgemm.sgemm(A, B, kernel=chosen))


@pytest.mark.gpu
def test_this_gpu_uses_its_table_entry():
    """On a GPU in the shipped table, auto runs each measured shape's fastest kernel."""
    name = fastsgemm.device_info()["name"]
    device = _tuning.read_table(_tuning.SHIPPED_TABLE)["devices"].get(name)
    if device is None:
        pytest.skip(f"{name} is not in the shipped table")
    for shape in device["shapes"]:
        assert fastsgemm.auto_kernel(shape["M"], shape["N"], shape["K"], count=shape.get("count", 1)) == \
            shape["kernel"], shape


@pytest.mark.gpu
def test_an_untuned_gpu_runs_cublas(tmp_path):
    """A table without this GPU (nor one of its compute capability) leaves auto on cuBLAS."""
    (tmp_path / "other.json").write_text(json.dumps({"format": 1, "devices": {"Some Other GPU": {
        "compute_capability": [1, 0], "shapes": [{"M": 64, "N": 64, "K": 64, "kernel": "warptile"}]}}}))
    script = "import fastsgemm; print(fastsgemm.auto_kernel(64, 64, 64), fastsgemm.auto_kernel(8192, 8192, 8192))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FASTSGEMM_TUNING=str(tmp_path / "other.json")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cublas", "cublas"]


def test_stacks_take_the_fastest_batched_kernel_at_the_shape_nearest_their_whole_output():
    """A stack of products is looked up by its whole output and K, and runs the fastest kernel that takes a
    stack in one launch as timed there (not the shape's own choice, which may not take one)."""
    batched = fastsgemm._registry.batched_candidates()
    assert {"tf32x3", "tf32x3:128x64", "tf32x3:direct", "cublas"} <= batched
    assert not {"warptile", "tf32x3_mma", "tf32", "cublas_tf32"} & batched  # SIMT, mma.sync, not FP32-accurate
    entries = [(128, 128, 128, "tf32x3_mma", ("tf32x3:direct", "cublas")),
               (2048, 2048, 2048, "tf32x3", ("tf32x3", "tf32x3:128x64", "cublas"))]
    assert _tuning.pick_batched(entries, 128, 128, 128, 1) == "tf32x3:direct"
    assert _tuning.pick_batched(entries, 128, 128, 128, 256) == "tf32x3"  # 256 x 128^2 outputs: 2048^2's
    assert _tuning.pick_batched(entries, 128, 128, 128, 2) == "tf32x3:direct"
    assert _tuning.pick_batched([(128, 128, 128, "warptile", ())], 128, 128, 128, 8) == "cublas"
    assert _tuning.pick_batched([], 128, 128, 128, 8) == "cublas"


def test_stacks_timed_as_stacks_stand_for_stacks_only():
    """An entry timed on a stack of products (count > 1) stands for stacks near it, by the stack's whole output,
    its K and, with a quarter of the weight, each product's M and N; a single product never takes a stack's
    entry."""
    entries = [(65536, 64, 1024, "tf32x3_regs:direct", ("tf32x3_regs:direct", "tf32x3_inplace", "cublas")),
               (2048, 2048, 2048, "tf32x3_inplace", ("tf32x3_inplace", "cublas")),
               (128, 128, 128, "tf32x3_inplace", ("tf32x3_inplace", "cublas"), 256),
               (256, 256, 256, "cublas", ("cublas", "tf32x3_inplace"), 64)]
    assert _tuning.pick(entries, 128, 128, 128) == "tf32x3_inplace"  # 2048^3's, not the stack of 128^3's
    assert _tuning.pick(entries[2:], 128, 128, 128) == "cublas"  # stacks only: no single product measured
    assert _tuning.pick_batched(entries, 128, 128, 128, 256) == "tf32x3_inplace"
    assert _tuning.pick_batched(entries, 256, 256, 256, 64) == "cublas"
    assert _tuning.pick_batched(entries, 120, 136, 128, 240) == "tf32x3_inplace"  # near the 256 x 128^3 stack
    assert _tuning._stack_distance(256, 256, 256, 64, entries[3]) == 0
    # Against a single product of the same whole output: 3 octaves of K, and (9 + 1) / 4 for M and N.
    assert _tuning._stack_distance(128, 128, 128, 256, entries[0]) == pytest.approx(3 + 10 / 4)
    assert _tuning._stack_distance(128, 128, 128, 256, entries[2]) == 0


def test_tune_reads_stacks_as_count_m_n_k():
    from fastsgemm import tune
    assert tune.parse_stack("256x128x64x32") == [256, 128, 64, 32]
    for bad in ("128x128x128", "0x4x4x4", "4x4x4x-1", "axbxcxd", "4x4x4x4x4"):
        with pytest.raises(argparse.ArgumentTypeError, match="countxMxNxK"):
            tune.parse_stack(bad)
    assert all(len(stack) == 4 and min(stack) >= 1 for stack in tune.DEFAULT_STACKS)
    assert set(tune.stack_candidates()) <= fastsgemm._registry.batched_candidates()
    assert tune.stack_candidates()[0] == "cublas"


def test_tune_refuses_nothing_to_measure():
    done = subprocess.run([sys.executable, "-m", "fastsgemm.tune", "--sizes", "--stacks"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "nothing to measure" in done.stderr, done.stderr



def test_tune_refuses_kernels_auto_cannot_run():
    """--kernels names candidates to time: a TF32 rung, a near-FP32 or data-dependent configuration and a name
    that is no kernel are each refused, with the candidates listed, before anything is measured."""
    for name in ["tf32", "ozaki:7", "ozaki:lesson", "no-such-kernel"]:
        done = subprocess.run([sys.executable, "-m", "fastsgemm.tune", "--sizes", "64", "--kernels", "ozaki", name],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and f"--kernels names what auto cannot run: {name} (" in done.stderr, done.stderr
        assert "tf32x3_regs" in done.stderr  # the candidates, listed

@pytest.mark.gpu
def test_stack_timing_runs_the_stack_and_checks_it():
    """benchmark(count=...) times the stack matmul runs, one call of the C core, and checks every product of it
    against cuBLAS's strided-batched call."""
    for kernel in ("tf32x3_inplace", "tf32x3_regs:direct", "warptile", "auto"):
        row = fastsgemm.benchmark(kernel, 96, 80, 72, count=5, repeats=3, warmup=1)
        assert row["count"] == 5 and row["median_ms"] > 0, row
        if row["picked"] == "cublas":  # auto's choice here may be cuBLAS, the reference itself
            assert kernel == "auto" and row["rel_error"] is None, row
            continue
        assert row["rel_error"] <= fastsgemm.testing.ERROR_BOUND["fp32"], row
        assert row["gflops"] == pytest.approx(2 * 5 * 96 * 80 * 72 / (row["median_ms"] * 1e6))
    auto = fastsgemm.benchmark("auto", 128, 128, 128, count=256, repeats=2, warmup=1)
    assert auto["picked"] == fastsgemm.auto_kernel(128, 128, 128, count=256)


@pytest.mark.gpu
def test_stack_timing_check_sees_the_results():
    """The check compares the stack's results with cuBLAS's: a TF32 kernel (one rounding of each operand to 10
    bits) is far outside the FP32 bound there, whether it runs the stack in one launch or product by product."""
    for kernel in ("tf32", "tf32_mma"):
        row = fastsgemm.benchmark(kernel, 256, 192, 512, count=3, repeats=1, warmup=0)
        assert row["rel_error"] > 5 * fastsgemm.testing.ERROR_BOUND["fp32"], row


@pytest.mark.gpu
def test_time_gemm_refuses_bad_stacks():
    from fastsgemm._device_array import matrix_core
    kernel = fastsgemm._registry.parse_kernel("tf32x3_inplace")
    a, b, out = (fastsgemm.DeviceArray.empty(shape) for shape in ((4 * 8, 8), (4 * 8, 8), (4 * 8, 8)))
    first = [(m[0], 8, 8, m[3], m[4]) for m in map(matrix_core, (a, b, out))]
    good = (first[0], first[1], None, first[2], 4, 64, 64, 64)
    assert len(fastsgemm._sgemm.time_gemm(kernel, [good], 1.0, 0.0, 0, 2, None)) == 2
    cases = {
        "memory it does not have": (first[0], first[1], None, first[2], 10**7, 64, 64, 64),  # far past the end
        "share elements": (first[0], first[1], None, first[2], 4, 64, 64, 0),  # every result in one place
        "at least one product": (first[0], first[1], None, first[2], 0, 64, 64, 64),
        "shapes do not agree": (first[0], (first[1][0], 7, 8, 8, 1), None, first[2], 4, 64, 64, 64),
        "alpha 1 and beta 0": (first[0], first[1], first[2], first[2], 4, 64, 64, 64),
        "out overlaps A": (first[0], first[1], None, first[0], 4, 64, 64, 64),  # the results over A's matrices
    }
    for message, stack in cases.items():
        with pytest.raises(ValueError, match=message):
            fastsgemm._sgemm.time_gemm(kernel, [stack], 1.0, 0.0, 0, 1, None)
    with pytest.raises(ValueError, match="each is a stack"):
        fastsgemm._sgemm.time_gemm(kernel, [good, tuple(matrix_core(x) for x in (a, b))[:2] + (None, first[2])],
                                   1.0, 0.0, 0, 1, None)
    with pytest.raises(ValueError, match="alpha 1 and beta 0"):
        fastsgemm._sgemm.time_gemm(kernel, [good], 2.0, 0.0, 0, 1, None)
    with pytest.raises(ValueError, match="alpha 1 and beta 0"):
        fastsgemm._sgemm.time_gemm(kernel, [good], 1.0, 0.5, 0, 1, None)
    plain = (matrix_core(a)[:1] + (8, 8, 8, 1), first[1], None, first[2])  # one 8 x 8 product, no C
    with pytest.raises(ValueError, match="beta != 0 needs a C matrix"):
        fastsgemm._sgemm.time_gemm(kernel, [plain], 1.0, 1.0, 0, 1, None)


@pytest.mark.gpu
def test_tune_merge_keeps_the_other_shapes_in_place(tmp_path):
    """--merge re-times only what it is given; the GPU's other entries stay where they were, a new stack is
    appended."""
    table = tmp_path / "table.json"
    name = fastsgemm.device_info()["name"]
    earlier = [{"M": 64, "N": 64, "K": 64, "kernel": "cublas", "median_ms": {"cublas": 1.0}},
               {"count": 3, "M": 32, "N": 32, "K": 32, "kernel": "cublas", "median_ms": {"cublas": 1.0}},
               {"M": 512, "N": 512, "K": 512, "kernel": "cublas", "median_ms": {"cublas": 1.0}}]
    table.write_text(json.dumps({"format": 1, "devices": {name: {"compute_capability": [9, 0], "shapes": earlier,
                                                                 "measured": {"date": "then"}}}}))
    done = subprocess.run([sys.executable, "-m", "fastsgemm.tune", "--stacks", "3x32x32x32", "2x48x40x24",
                           "--merge", "--repeats", "2", "--warmup", "0", "--output", str(table)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    shapes = json.loads(table.read_text())["devices"][name]["shapes"]
    assert [(s.get("count", 1), s["M"], s["N"], s["K"]) for s in shapes] == \
        [(1, 64, 64, 64), (3, 32, 32, 32), (1, 512, 512, 512), (2, 48, 40, 24)]
    assert shapes[0] == earlier[0] and shapes[2] == earlier[2]
    assert shapes[1]["median_ms"] != {"cublas": 1.0} and set(shapes[1]["median_ms"]) <= \
        fastsgemm._registry.batched_candidates()
    assert json.loads(table.read_text())["devices"][name]["measured"]["kept_from"] == {"date": "then"}


def test_the_shipped_table_gives_every_stack_a_batched_kernel():
    for name, (_, entries) in _tuning.tuned_devices().items():
        for count, size in [(256, 128), (64, 256), (8, 1024), (3, 4095), (1000, 8)]:
            assert _tuning.pick_batched(entries, size, size, size, count) in fastsgemm._registry.batched_candidates()


def test_auto_never_runs_near_fp32_configurations_or_rungs_kept_from_it():
    """ozaki:7 stays within the FP32 bound, but its error is above cuBLAS FP32's (benchmarks/results/
    numerics-h200.json): the registry marks it near-fp32. ozaki:lesson is FP32-accurate, but its speed depends on
    the data, which auto cannot see: the registry keeps it from auto (not_for_auto). The engine's ozaki, whose time
    the data moves by at most a fifth (benchmarks/results/raw/ozaki-classes-engine-h200-53958ee-4096.json), is a
    candidate. Neither the candidates nor any shipped choice include the others."""
    near = {f"{k.name}:{c.name}" for k in fastsgemm.kernels() for c in k.configs if c.precision == "near-fp32"}
    kept = {name for k in fastsgemm.kernels() if k.not_for_auto
            for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs))}
    kept |= {f"{k.name}:{c.name}" for k in fastsgemm.kernels() for c in k.configs if c.not_for_auto}
    assert "ozaki:7" in near and "ozaki:lesson" in kept and "ozaki" not in kept | near
    assert "ozaki" in fastsgemm._registry.auto_candidates()
    assert not (near | kept) & set(fastsgemm._registry.auto_candidates())
    assert not (near | kept) & fastsgemm._registry.batched_candidates()
    shipped = json.loads(_tuning.SHIPPED_TABLE.read_text())["devices"]
    chosen = {shape["kernel"] for entry in shipped.values() for shape in entry["shapes"]}
    assert not (near | kept) & chosen


@pytest.mark.parametrize(("name", "capability", "expect"), [
    ("NVIDIA H100 80GB HBM3", (9, 0), "on this GPU"),
    ("NVIDIA H800", (9, 0), "a tuned GPU of the same compute capability"),
    ("NVIDIA A100-SXM4-80GB", (8, 0), "has no entry in the tuning table: cuBLAS"),
])
def test_auto_says_why_it_runs_what_it_runs(monkeypatch, name, capability, expect):
    """python -m fastsgemm prints this for a few sizes: the measured shape behind the choice, and whose entry it
    is; without a GPU, from the shipped table and a stand-in for the device query."""
    monkeypatch.setattr(_tuning._sgemm, "device_info", lambda device: {"name": name, "compute_capability": capability})
    monkeypatch.setattr(_tuning, "cublas_opens", lambda: True)
    _tuning._entries_for.cache_clear()
    _tuning.choose.cache_clear()
    try:
        why = _tuning.explain(0, 1024, 1024, 1024)
        kernel = _tuning.choose(0, 1024, 1024, 1024)
    finally:  # the stand-in's answers must not outlive the test
        _tuning._entries_for.cache_clear()
        _tuning.choose.cache_clear()
    assert expect in why, why
    if capability == (9, 0):
        assert "timed at 1024x1024x1024" in why, why  # the shipped table measured this very shape
        assert kernel != "cublas" or "cannot take" in why, (kernel, why)
    else:
        assert kernel == "cublas", kernel
