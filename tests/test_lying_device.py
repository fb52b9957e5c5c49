"""Device operands that lie about the memory behind them (GPU only). Each case runs in its own process and
asserts two things: the clean TypeError or ValueError, and that the process's CUDA context still works
afterwards (a fault in a kernel would lose it for good). The host-side cases are tests/test_lying_inputs.py."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.gpu

# Prepended to every case: the names the cases use, and the check that ends each one.
PRELUDE = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import fastsgemm
from fastsgemm import DeviceArray, _sgemm
from fastsgemm.testing import current_device
from lying import DLPackProducer, ForgedTensor, Interface, cai

rng = np.random.default_rng(1)

def expect(error, fragment, call):
    try:
        call()
    except error as raised:
        assert fragment in str(raised), f"{{raised!r}} does not say {{fragment!r}}"
        print("raised:", raised)
    else:
        raise AssertionError(f"no {{error.__name__}}")

def context_still_works():
    a, b = rng.standard_normal((65, 33), dtype=np.float32), rng.standard_normal((33, 17), dtype=np.float32)
    got = fastsgemm.sgemm(DeviceArray.from_numpy(a), DeviceArray.from_numpy(b)).numpy()
    assert np.allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    print("CONTEXT OK")
"""


def run_case(body, timeout=120):
    code = PRELUDE.format(tests=str(TESTS)) + textwrap.dedent(body) + "\ncontext_still_works()\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    report = done.stdout + done.stderr
    assert done.returncode == 0, f"exit {done.returncode}:\n{report[-3000:]}"
    assert "CONTEXT OK" in done.stdout, report[-3000:]
    return done.stdout


def test_out_claiming_more_than_its_allocation_is_refused_and_its_neighbour_kept():
    out = run_case("""
        A, B = DeviceArray.from_numpy(np.ones((64, 16), np.float32)), DeviceArray.from_numpy(np.ones((16, 16), np.float32))
        small = _sgemm.DeviceBuffer(16 * 16 * 4, current_device())               # room for 16 x 16
        neighbour = DeviceArray.from_numpy(np.full((64, 16), 5.0, np.float32))   # allocated right after
        lying_out = cai(small.ptr, (64, 16))                                     # claims 64 x 16
        expect(ValueError, "claims memory it does not have", lambda: fastsgemm.sgemm(A, B, out=lying_out))
        expect(ValueError, "its allocation, which holds 1024 bytes",
               lambda: fastsgemm.sgemm(A, B, out=lying_out, kernel="warptile"))
        assert (neighbour.numpy() == 5.0).all()
    """)
    assert "out: shape (64, 16)" in out


def test_strides_far_past_the_end_are_refused_before_any_kernel_runs():
    run_case("""
        memory = DeviceArray.from_numpy(rng.standard_normal((16, 16), dtype=np.float32))
        B = DeviceArray.from_numpy(np.ones((16, 16), np.float32))
        for strides in [(4 << 30, 4), (64, 4 << 30), (1 << 62, 4), (-(1 << 62), 4), (-64, 4), (64, -4)]:
            expect(ValueError, "claims memory it does not have" if abs(strides[0]) < 1 << 40 else "",
                   lambda: fastsgemm.sgemm(cai(memory.ptr, (16, 16), strides), B))
            expect(ValueError, "A:", lambda: fastsgemm.sgemm(cai(memory.ptr, (16, 16), strides), B, kernel="tf32x3"))
    """)


def test_pointers_that_are_not_device_memory_are_refused():
    run_case("""
        B = DeviceArray.from_numpy(np.ones((4, 4), np.float32))
        host = np.ones((4, 4), np.float32)
        expect(ValueError, "is not CUDA device or managed memory",
               lambda: fastsgemm.sgemm(cai(host.ctypes.data, (4, 4)), B))
        expect(ValueError, "is not CUDA device or managed memory", lambda: fastsgemm.sgemm(cai(1 << 20, (4, 4)), B))
        two = DeviceArray.from_numpy(np.ones((2, 2), np.float32))
        expect(ValueError, "not 4-byte aligned", lambda: fastsgemm.sgemm(cai(B.ptr + 2, (2, 2)), two))
    """)


def test_garbage_streams_are_refused_without_a_crash():
    run_case("""
        memory = DeviceArray.from_numpy(np.ones((4, 4), np.float32))
        for stream in [12345, 64, -8, 1 << 70]:
            expect(ValueError, "not a CUDA stream handle",
                   lambda: fastsgemm.sgemm(cai(memory.ptr, (4, 4), stream=stream), memory))
            expect(ValueError, "not a CUDA stream handle",
                   lambda: fastsgemm.sgemm_raw(4, 4, 4, 1.0, memory.ptr, 4, memory.ptr, 4, 0.0,
                                               DeviceArray.empty((4, 4)).ptr, 4, stream=stream))
    """)


def test_sgemm_raw_checks_every_pointer_against_its_allocation():
    run_case("""
        a, b, c = (DeviceArray.from_numpy(np.ones((8, 8), np.float32)) for _ in range(3))
        expect(ValueError, "C: shape (8, 8) with strides (64, 1)",
               lambda: fastsgemm.sgemm_raw(8, 8, 8, 1.0, a.ptr, 8, b.ptr, 8, 0.0, c.ptr, 64))
        expect(ValueError, "A: ", lambda: fastsgemm.sgemm_raw(8, 8, 8, 1.0, a.ptr + 16, 8, b.ptr, 8, 0.0, c.ptr, 8))
        expect(ValueError, "B: shape (8, 8) with strides (16, 1)",
               lambda: fastsgemm.sgemm_raw(8, 8, 8, 1.0, a.ptr, 8, b.ptr, 16, 0.0, c.ptr, 8))
        expect(ValueError, "A: shape (8, 16) with strides (1, 8)",
               lambda: fastsgemm.sgemm_raw(8, 8, 16, 1.0, a.ptr, 8, b.ptr, 8, 0.0, c.ptr, 8, trans_a=True))
        expect(ValueError, "not 4-byte aligned",
               lambda: fastsgemm.sgemm_raw(8, 8, 8, 1.0, a.ptr + 2, 8, b.ptr, 8, 0.0, c.ptr, 8))
        fastsgemm.sgemm_raw(8, 8, 8, 1.0, a.ptr, 8, b.ptr, 8, 0.0, c.ptr, 8)   # and the honest call works
        assert (c.numpy() == 8.0).all()
    """)


def test_forged_dlpack_tensors_past_their_allocation_are_refused():
    run_case("""
        memory = DeviceArray.from_numpy(np.ones((8, 8), np.float32))
        B = DeviceArray.from_numpy(np.ones((8, 8), np.float32))
        device = current_device()
        for shape, strides in [((8, 8), (64, 1)), ((8, 8), (8, 9)), ((8, 8), (-8, 1))]:
            tensor = ForgedTensor(memory.ptr, shape, strides, device_id=device)
            expect(ValueError, "claims memory it does not have",
                   lambda: fastsgemm.sgemm(DLPackProducer(tensor, (2, device)), B))
            assert tensor.deleted == 1
    """)


def test_cupy_views_past_their_memory_are_refused():
    pytest.importorskip("cupy")
    run_case("""
        import cupy
        from cupy.lib.stride_tricks import as_strided
        base = cupy.ones((8, 8), cupy.float32)
        B = cupy.ones((8, 8), cupy.float32)
        past = as_strided(base, (8, 8), (4 << 20, 4))   # CuPy does not check this view against its memory
        assert _sgemm.sgemm_fast(past, B, None, None, 1.0, 0.0, "auto") is NotImplemented
        expect(ValueError, "claims memory it does not have", lambda: fastsgemm.sgemm(past, B))
        expect(ValueError, "out: ", lambda: fastsgemm.sgemm(B, B, out=as_strided(base, (8, 8), (4 << 20, 4))))
    """)


def test_torch_tensors_wrapping_a_lying_interface_are_refused():
    pytest.importorskip("torch")
    run_case("""
        import torch
        small = _sgemm.DeviceBuffer(16 * 16 * 4, current_device())
        lying = torch.as_tensor(cai(small.ptr, (4096, 4096)), device="cuda")   # torch keeps the claimed shape
        B = torch.ones((4096, 8), device="cuda")
        assert _sgemm.sgemm_fast(lying, B, None, None, 1.0, 0.0, "auto") is NotImplemented
        expect(ValueError, "claims memory it does not have", lambda: fastsgemm.sgemm(lying, B))
    """)


def test_views_past_the_mapped_part_of_a_reservation_are_refused():
    """PyTorch's expandable segments reserve a large address range and map memory into it as needed: the
    driver's allocation range is the whole reservation, so the mapped pieces are what bound a view."""
    pytest.importorskip("torch")
    import os

    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    try:
        run_case("""
            import torch
            t = torch.ones((256, 1024), device="cuda")                          # 1 MiB, mapped
            B = torch.ones((1024, 8), device="cuda")
            assert torch.cuda.memory_reserved() < 1 << 30                       # far less than is reserved
            past = cai(t.data_ptr(), (256 * 1024, 1024))                        # 1 GiB from the same pointer
            expect(ValueError, "claims memory it does not have", lambda: fastsgemm.sgemm(past, B))
            assert torch.allclose(fastsgemm.sgemm(t, B), torch.full((256, 8), 1024.0, device="cuda"))
        """)
    finally:
        del os.environ["PYTORCH_CUDA_ALLOC_CONF"]


def test_the_interface_fuzz_keeps_every_byte_outside_its_views():
    pytest.importorskip("hypothesis")
    done = subprocess.run([sys.executable, str(TESTS / "lying_fuzz.py"), "--examples", "300"], capture_output=True,
                          text=True, timeout=900)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-4000:]
    assert "0 failures, context works" in done.stdout, report[-4000:]


@pytest.mark.sanitizer
def test_the_interface_fuzz_is_memcheck_clean():
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    pytest.importorskip("hypothesis")
    command = [sanitizer, "--tool", "memcheck", "--error-exitcode", "99", sys.executable, str(TESTS / "lying_fuzz.py"),
               "--examples", "120"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=2400)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-4000:]
    assert "ERROR SUMMARY: 0 errors" in report and "0 failures, context works" in report, report[-4000:]
