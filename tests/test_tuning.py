"""kernel="auto" and the tuning table behind it (fastsgemm._tuning, python -m fastsgemm.tune).

The table logic runs everywhere; what auto runs on this GPU, and that it runs it, needs one.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fastsgemm
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
    that choice back."""
    from fastsgemm.tune import choose
    table = _tuning.read_table(_tuning.SHIPPED_TABLE)
    known = fastsgemm._registry.auto_candidates()
    assert "tf32" not in known and "cublas_tf32" not in known and "cublas" in known
    for name, device in table["devices"].items():
        assert len(device["compute_capability"]) == 2, name
        entries = [(s["M"], s["N"], s["K"], s["kernel"]) for s in device["shapes"]]
        assert entries, name
        for shape, entry in zip(device["shapes"], entries):
            times = shape["median_ms"]
            assert set(times) <= set(known) and "cublas" in times, (name, shape)
            assert shape["kernel"] == choose(times), (name, shape)
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
        assert fastsgemm.auto_kernel(shape["M"], shape["N"], shape["K"]) == shape["kernel"], shape


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


def test_the_shipped_table_gives_every_stack_a_batched_kernel():
    for name, (_, entries) in _tuning.tuned_devices().items():
        for count, size in [(256, 128), (64, 256), (8, 1024), (3, 4095), (1000, 8)]:
            assert _tuning.pick_batched(entries, size, size, size, count) in fastsgemm._registry.batched_candidates()


def test_auto_never_runs_near_fp32_configurations_or_rungs_kept_from_it():
    """ozaki:7 stays within the FP32 bound, but its error is above cuBLAS FP32's (benchmarks/results/
    numerics-h200.json): the registry marks it near-fp32. ozaki is FP32-accurate, but its speed depends on the
    data, which auto cannot see: the registry keeps it from auto (not_for_auto). Neither the candidates nor any
    shipped choice include them."""
    near = {f"{k.name}:{c.name}" for k in fastsgemm.kernels() for c in k.configs if c.precision == "near-fp32"}
    kept = {name for k in fastsgemm.kernels() if k.not_for_auto
            for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs))}
    assert "ozaki:7" in near and {"ozaki", "ozaki:7"} <= kept
    assert not (near | kept) & set(fastsgemm._registry.auto_candidates())
    assert not (near | kept) & fastsgemm._registry.batched_candidates()
    shipped = json.loads(_tuning.SHIPPED_TABLE.read_text())["devices"]
    chosen = {shape["kernel"] for entry in shipped.values() for shape in entry["shapes"]}
    assert not (near | kept) & chosen
