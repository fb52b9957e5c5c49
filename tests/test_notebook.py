"""examples/quickstart.ipynb runs from top to bottom, here as a user would run it (nbclient, a fresh kernel): on a
machine without a GPU its GPU cells say so and skip, and the cpu rung does the work; with a GPU every cell runs.
The committed notebook is what examples/make_quickstart.py writes."""
import os
import sys
from pathlib import Path

import pytest

import fastsgemm

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def test_the_notebook_is_what_its_generator_writes():
    nbformat = pytest.importorskip("nbformat")
    sys.path.insert(0, str(NOTEBOOK.parent))
    try:
        import make_quickstart
    finally:
        sys.path.pop(0)
    committed = nbformat.read(NOTEBOOK, as_version=4)
    sources = [(cell.cell_type, cell.source) for cell in committed.cells]
    assert sources == [(cell.cell_type, cell.source) for cell in make_quickstart.build().cells], (
        "examples/quickstart.ipynb differs from examples/make_quickstart.py: run the generator")


def test_the_notebook_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel is this Python (its environment holds fastsgemm), started in the repository's root.
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    os.environ.setdefault("MPLBACKEND", "Agg")
    client.execute()  # raises CellExecutionError, with the cell and its traceback, where a cell fails
    printed = "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for output in cell.outputs if output.get("output_type") == "stream")
    assert "relative error against float64" in printed and "matches 0.5 A B + 2 D: True" in printed, printed
    if fastsgemm.cuda_available():
        assert "skipped" not in printed or "PyTorch with CUDA" in printed, printed
        assert "cublas" in printed, printed
    else:
        assert "no usable GPU here" in printed and "skipped: the CUDA rungs need a GPU" in printed, printed
