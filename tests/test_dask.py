"""fastsgemm.dask.matmul: dask.array matrices multiplied block by block with fastsgemm, each output block accumulated
along K in place. The CPU tests run the cpu rung on NumPy chunks (CI has no GPU); the GPU tests run CuPy chunks and
host chunks on the GPU. Skipped where Dask is not installed."""
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import fastsgemm  # noqa: E402
import fastsgemm.dask as fsd  # noqa: E402
from conftest import FP32_TOLERANCE  # noqa: E402


TWO_GPUS = pytest.mark.skipif(fastsgemm.device_count() < 2,
                              reason="needs two CUDA devices")


def cupy_blocks_and_joined(z):
    """The blocks of a CuPy-chunked result as computed (each where it was made, not joined), and all of them
    joined on the host."""
    cupy = pytest.importorskip("cupy")
    blocks = dask.compute(*z.to_delayed().ravel(), scheduler="threads")
    columns = z.numblocks[1]
    grid = [[cupy.asnumpy(blocks[i * columns + j]) for j in range(columns)] for i in range(z.numblocks[0])]
    return blocks, np.block(grid)


def relative_error(value, a, b):
    reference = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.linalg.norm(reference)
    return np.linalg.norm(value - reference) / scale if scale else np.linalg.norm(value)


def random_chunks(rng, extent):
    """A random chunking of `extent`: chunks of 1 element up to the whole extent, uneven."""
    if extent == 0:
        return (0,)
    cuts = np.sort(rng.choice(np.arange(1, extent), size=min(extent - 1, int(rng.integers(0, 5))), replace=False))
    return tuple(int(c) for c in np.diff(np.concatenate(([0], cuts, [extent]))))


# (M, K, N): odd sizes, a K of 1, an empty dimension, tall and wide.
SHAPES = [(37, 53, 29), (1, 1, 1), (64, 1, 17), (5, 97, 3), (0, 8, 5), (6, 0, 7), (128, 40, 1), (3, 300, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("seed", range(4))
def test_odd_shapes_and_chunkings_match_numpy(shape, seed):
    rng = np.random.default_rng([seed, *shape])
    m, k, n = shape
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    # Independent chunkings: the K chunks of x and y differ unless the draw makes them equal.
    x = da.from_array(a, chunks=(random_chunks(rng, m), random_chunks(rng, k)))
    y = da.from_array(b, chunks=(random_chunks(rng, k), random_chunks(rng, n)))
    z = fsd.matmul(x, y, kernel="cpu")
    assert z.shape == (m, n) and z.dtype == np.float32
    assert z.chunks == (x.chunks[0], y.chunks[1])
    result = z.compute(scheduler="threads")
    assert isinstance(result, np.ndarray) and result.shape == (m, n)
    assert relative_error(result, a, b) < FP32_TOLERANCE


def test_each_output_block_is_accumulated_in_place(monkeypatch):
    """Each output block is made by its first product and every later product is added into that very block
    (beta = 1, out = the block), which the block's task returns: no partial product is a block of its own."""
    calls = []
    original = fsd.sgemm

    def recording(a, b, c=None, **options):
        result = original(a, b, c, **options)
        calls.append((c, options.get("beta", 0.0), options.get("out"), result))
        return result

    monkeypatch.setattr(fsd, "sgemm", recording)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((40, 90), dtype=np.float32), rng.standard_normal((90, 30), dtype=np.float32)
    z = fsd.matmul(da.from_array(a, chunks=(20, 30)), da.from_array(b, chunks=(30, 15)), kernel="cpu")
    blocks = dask.compute(*z.to_delayed().ravel(), scheduler="sync")
    assert len(calls) == 4 * 3  # 4 output blocks, 3 K chunks each; one task at a time on the sync scheduler
    made = []
    for n in range(4):
        first, *later = calls[3 * n:3 * n + 3]
        assert first[0] is None and first[1] == 0.0
        for c, beta, out, result in later:
            assert c is first[3] and out is first[3] and result is first[3] and beta == 1.0
        made.append(first[3])
    assert all(sum(block is first for first in made) == 1 for block in blocks)
    assert relative_error(np.block([[blocks[0], blocks[1]], [blocks[2], blocks[3]]]), a, b) < FP32_TOLERANCE


def test_the_graph_has_one_task_per_output_block_and_no_sum():
    x = da.ones((60, 90), chunks=(20, 30), dtype=np.float32)
    y = da.ones((90, 40), chunks=(30, 20), dtype=np.float32)
    z = fsd.matmul(x, y, kernel="cpu")
    ours = dict(z.dask.layers[z.name])
    assert len(ours) == 3 * 2  # output blocks; host chunks have no tasks of their own to move them
    functions = [task[0] if isinstance(task, tuple) else task.func for task in ours.values()]
    assert functions == [fsd._host_block] * 6
    np.testing.assert_array_equal(z.compute(scheduler="sync"), np.full((60, 40), 90, np.float32))


def test_blocks_take_the_gpus_in_turn():
    x = da.ones((60, 90), chunks=(20, 30), dtype=np.float32)
    y = da.ones((90, 40), chunks=(30, 20), dtype=np.float32)
    z = fsd.matmul(x, y, kernel="cpu")
    gpus = fsd.gpus_for_blocks(None)  # every GPU this process sees, or [None] where there is none
    assert gpus == (list(range(fastsgemm.device_count())) if fastsgemm.cuda_available() else [None])
    tasks = dict(z.dask.layers[z.name])
    assert [tasks[(z.name, i, j)][-1] for i in range(3) for j in range(2)] == \
        [gpus[(i * 2 + j) % len(gpus)] for i in range(3) for j in range(2)]
    with pytest.raises(TypeError, match="list of GPUs"):
        fsd.matmul(x, y, devices=0)
    with pytest.raises(ValueError, match="empty"):
        fsd.matmul(x, y, devices=[])


@pytest.mark.gpu
def test_host_and_device_chunks_are_not_mixed():
    cupy = pytest.importorskip("cupy")
    x = da.ones((4, 5), chunks=2, dtype=np.float32)
    y = da.from_array(cupy.ones((5, 3), cupy.float32), chunks=2, asarray=False)
    with pytest.raises(TypeError, match="both host"):
        fsd.matmul(x, y)


def test_only_the_smaller_operand_is_rechunked_and_only_along_k():
    x = da.ones((100, 60), chunks=(25, 20), dtype=np.float32)  # 24 KB
    y = da.ones((60, 400), chunks=(30, 100), dtype=np.float32)  # 96 KB
    x2, y2 = fsd.align_k_chunks(x, y)
    assert y2 is y and x2.chunks == ((25,) * 4, (30, 30))
    big_x = da.ones((1000, 60), chunks=(250, 20), dtype=np.float32)
    x3, y3 = fsd.align_k_chunks(big_x, y)
    assert x3 is big_x and y3.chunks == ((20, 20, 20), (100,) * 4)
    same = da.ones((60, 10), chunks=(20, 5), dtype=np.float32)
    assert fsd.align_k_chunks(x, same) == (x, same)


def test_the_distributed_scheduler_in_one_process():
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((70, 50), dtype=np.float32), rng.standard_normal((50, 45), dtype=np.float32)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        z = fsd.matmul(da.from_array(a, chunks=20), da.from_array(b, chunks=(15, 20)), kernel="cpu")
        result = client.compute(z).result()
    assert relative_error(result, a, b) < FP32_TOLERANCE


def test_errors_say_what_is_wrong():
    x = da.ones((4, 5), chunks=2, dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        fsd.matmul(x, da.ones((5, 3), chunks=2, dtype=np.float64))
    with pytest.raises(TypeError, match="dask.array"):
        fsd.matmul(x, np.ones((5, 3), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        fsd.matmul(x, da.ones((2, 5, 3), chunks=2, dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(4, 5\).*\(6, 3\)"):
        fsd.matmul(x, da.ones((6, 3), chunks=2, dtype=np.float32))
    unknown = da.ones((8, 5), chunks=2, dtype=np.float32)
    unknown = unknown[unknown[:, 0] > 0]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        fsd.matmul(unknown, da.ones((5, 3), chunks=2, dtype=np.float32))


def test_import_fastsgemm_does_not_import_dask():
    code = "import sys, fastsgemm; assert 'dask' not in sys.modules, 'dask was imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "tf32x3", "warptile", "cublas"])
def test_host_chunks_are_computed_on_the_gpu(kernel):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((700, 900), dtype=np.float32), rng.standard_normal((900, 500), dtype=np.float32)
    z = fsd.matmul(da.from_array(a, chunks=(300, 256)), da.from_array(b, chunks=(200, 250)), kernel=kernel)
    result = z.compute(scheduler="threads")
    assert isinstance(result, np.ndarray)
    assert relative_error(result, a, b) < FP32_TOLERANCE


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "tf32x3", "cublas"])
def test_cupy_chunks_stay_on_the_gpu(kernel):
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((1000, 1300), dtype=np.float32), rng.standard_normal((1300, 600), dtype=np.float32)
    x = da.from_array(cupy.asarray(a), chunks=(256, 512), asarray=False)
    y = da.from_array(cupy.asarray(b), chunks=(400, 300), asarray=False)
    z = fsd.matmul(x, y, kernel=kernel)
    assert isinstance(z._meta, cupy.ndarray)
    result = z.compute(scheduler="threads")
    assert isinstance(result, cupy.ndarray)
    assert relative_error(cupy.asnumpy(result), a, b) < FP32_TOLERANCE


@pytest.mark.gpu
@TWO_GPUS
def test_cupy_chunks_on_the_second_gpu_are_computed_there():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((600, 700), dtype=np.float32), rng.standard_normal((700, 500), dtype=np.float32)
    with cupy.cuda.Device(1):
        x = da.from_array(cupy.asarray(a), chunks=256, asarray=False)
        y = da.from_array(cupy.asarray(b), chunks=256, asarray=False)
    z = fsd.matmul(x, y, devices=[1])
    blocks, joined = cupy_blocks_and_joined(z)
    assert all(block.device.id == 1 for block in blocks)
    assert relative_error(joined, a, b) < FP32_TOLERANCE



@pytest.fixture
def no_limit_after():
    """Whatever limit a test sets, every GPU is without one after it."""
    yield fastsgemm.set_device_memory_limit
    fastsgemm.set_device_memory_limit(None)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["tf32x3", "warptile"])
def test_host_chunks_stream_through_a_gpu_budget_of_a_quarter_of_the_operands(kernel, no_limit_after):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3000, 2500), dtype=np.float32), rng.standard_normal((2500, 2800), dtype=np.float32)
    # Above what fastsgemm holds already (the cuBLAS workspaces of threads that called it before, 32 MiB each).
    held_before = fastsgemm.device_memory(0)["in_use"]
    budget = held_before + (a.nbytes + b.nbytes + 4 * 3000 * 2800) // 4
    no_limit_after(budget, device=0)
    fastsgemm.reset_device_memory_peak(0)
    z = fsd.matmul(da.from_array(a, chunks=700), da.from_array(b, chunks=700), kernel=kernel, devices=[0])
    result = z.compute(scheduler="threads")
    counts = fastsgemm.device_memory(0)
    assert counts["limit"] == budget
    assert held_before < counts["peak"] <= budget  # the GPU did the work, within its budget
    assert counts["in_use"] == held_before  # every block, chunk and workspace given back
    assert relative_error(result, a, b) < FP32_TOLERANCE


@pytest.mark.gpu
def test_a_budget_too_small_for_one_block_says_so(no_limit_after):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((600, 500), dtype=np.float32), rng.standard_normal((500, 400), dtype=np.float32)
    limit = fastsgemm.device_memory(0)["in_use"] + (1 << 20)  # 1 MiB more; a 300 x 400 block and its chunks need 2
    no_limit_after(limit, device=0)
    z = fsd.matmul(da.from_array(a, chunks=300), da.from_array(b, chunks=(300, 400)), kernel="tf32x3", devices=[0])
    with pytest.raises(MemoryError, match=f"limit on cuda:0 is {limit} bytes"):
        z.compute(scheduler="sync")
    no_limit_after(None)
    assert relative_error(z.compute(scheduler="sync"), a, b) < FP32_TOLERANCE


@pytest.mark.gpu
@TWO_GPUS
def test_cupy_chunks_spread_over_two_gpus_each_block_on_the_gpu_it_was_given():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((900, 700), dtype=np.float32), rng.standard_normal((700, 800), dtype=np.float32)
    with cupy.cuda.Device(0):
        x = da.from_array(cupy.asarray(a), chunks=300, asarray=False)
        y = da.from_array(cupy.asarray(b), chunks=(300, 400), asarray=False)
    z = fsd.matmul(x, y)  # every GPU: blocks alternate between GPU 0 and GPU 1
    blocks, joined = cupy_blocks_and_joined(z)
    assert [block.device.id for block in blocks] == [n % 2 for n in range(len(blocks))]
    assert relative_error(joined, a, b) < FP32_TOLERANCE
    moves = [key for key in z.dask if isinstance(key, tuple) and str(key[0]).endswith("-on-gpu")]
    assert len(moves) == len(set(moves)) and all(key[-1] in (0, 1) for key in moves)


@pytest.mark.gpu
@TWO_GPUS
def test_host_chunks_spread_over_two_gpus(no_limit_after):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((1000, 600), dtype=np.float32), rng.standard_normal((600, 700), dtype=np.float32)
    fastsgemm.reset_device_memory_peak()
    before = [fastsgemm.device_memory(d)["in_use"] for d in (0, 1)]
    z = fsd.matmul(da.from_array(a, chunks=250), da.from_array(b, chunks=350), kernel="tf32x3", devices=[0, 1])
    assert relative_error(z.compute(scheduler="threads"), a, b) < FP32_TOLERANCE
    assert all(fastsgemm.device_memory(d)["peak"] > before[d] for d in (0, 1))  # both GPUs staged blocks
