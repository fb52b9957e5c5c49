"""Every thread: the first call of each entry point, in a fresh process, from a thread on which no CUDA context
is current (a new thread, a concurrent.futures pool, a task of Dask's threaded scheduler, torch's autograd
worker). tests/thread_workload.py makes each call and checks its product against float64.

The scenarios run as subprocesses, several at once, the first time a test asks; each test then reads its own
scenario's outcome. With two GPUs every scenario also runs on device 1."""
import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import fastsgemm
from conftest import run_at_once

WORKLOAD = Path(__file__).with_name("thread_workload.py")
ENTRIES = ["numpy_sgemm", "buffer_sgemm", "numpy_matmul", "device_array", "torch_sgemm", "interface_sgemm",
           "torch_matmul", "sgemm_raw", "cupy_sgemm", "torch_forward"]
NEEDS = {"torch_sgemm": "torch", "interface_sgemm": "torch", "torch_matmul": "torch", "sgemm_raw": "torch",
         "torch_forward": "torch", "cupy_sgemm": "cupy"}
THREADS = ["thread", "pool", "dask"]
AUTOGRAD = ["autograd_backward", "autograd_sum", "autograd_grad"]


def installed(package):
    return importlib.util.find_spec(package) is not None


@functools.cache
def gpu_count():
    return fastsgemm.device_count()


def scenarios():
    """(entry, thread kind, device) for every scenario this machine can run."""
    devices = range(min(gpu_count(), 2))
    found = [(entry, thread, device) for device in devices for thread in THREADS for entry in ENTRIES
             if (thread != "dask" or installed("dask")) and (entry not in NEEDS or installed(NEEDS[entry]))]
    if installed("torch"):
        found += [(entry, "autograd", device) for device in devices for entry in AUTOGRAD]
    return found


@functools.cache
def outcomes():
    """Each scenario's (return code, output), from one run of all of them."""
    done = run_at_once({scenario: [sys.executable, str(WORKLOAD), *map(str, scenario)] for scenario in scenarios()})
    return {scenario: (result.returncode, result.stdout + result.stderr) for scenario, result in done.items()}


def params(entries, threads):
    return [pytest.param(entry, thread, device, id=f"{entry}-{thread}-gpu{device}")
            for device in (0, 1) for thread in threads for entry in entries]


def check_scenario(entry, thread, device):
    if device >= max(gpu_count(), 1):
        pytest.skip("needs two CUDA devices")
    if entry in NEEDS:
        pytest.importorskip(NEEDS[entry])
    if thread == "dask":
        pytest.importorskip("dask")
    code, output = outcomes()[(entry, thread, device)]
    assert code == 0 and output.strip().endswith("ok"), f"{entry} on a {thread} thread, device {device}:\n{output}"


@pytest.mark.gpu
@pytest.mark.parametrize(("entry", "thread", "device"), params(ENTRIES, THREADS))
def test_first_call_on_a_thread_without_a_context(entry, thread, device):
    check_scenario(entry, thread, device)


@pytest.mark.gpu
@pytest.mark.parametrize(("entry", "thread", "device"), params(AUTOGRAD, ["autograd"]))
def test_first_backward_on_torchs_autograd_worker(entry, thread, device):
    """The backward's products are the first CUDA work of torch's autograd worker thread."""
    check_scenario(entry, thread, device)


def test_the_workload_refuses_what_it_does_not_know():
    """A misspelt scenario must fail, not pass as a run of nothing."""
    done = subprocess.run([sys.executable, str(WORKLOAD), "numpy_sgemm", "fibre", "0"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "unknown thread kind" in done.stderr
