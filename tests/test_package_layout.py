"""The Python package reads down (issue 46): its modules import each other without a cycle, and the core never
imports an integration (fastsgemm.torch, fastsgemm.dask), which import the core. Read from the sources, every
import counted, those inside functions too."""
import ast
from pathlib import Path

import fastsgemm

PACKAGE = Path(fastsgemm.__file__).parent
INTEGRATIONS = {"torch", "dask"}  # fastsgemm.torch, fastsgemm.dask
TOOLS = {"__main__", "bench", "tune"}  # command-line tools: they import the whole package, nothing imports them


def package_imports(path: Path, modules: set) -> set:
    """The package's modules that `path` imports, by their names inside the package ("__init__" for the package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x, from .x import y
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fastsgemm":
            parts = node.module.split(".")
            found.update([parts[1]] if len(parts) > 1 else ["__init__", *(a.name for a in node.names)])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "fastsgemm":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return found & modules - {path.stem}


def import_graph() -> dict:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    return {p.stem: package_imports(p, modules) for p in PACKAGE.glob("*.py")}


def test_the_graph_is_read():
    """The reader sees the imports it must see (else the tests below would pass on an empty graph)."""
    graph = import_graph()
    assert {"_api", "_matmul", "torch", "dask", "__init__"} <= set(graph)
    assert "_matmul" in graph["torch"] and "_api" in graph["__init__"], graph


def test_the_core_imports_no_integration():
    graph = import_graph()
    for module, imports in graph.items():
        if module not in INTEGRATIONS | TOOLS:
            assert not imports & INTEGRATIONS, f"fastsgemm.{module} imports {sorted(imports & INTEGRATIONS)}"


def test_no_import_cycle():
    graph = import_graph()
    done, path = set(), []

    def visit(module):
        if module in path:
            cycle = path[path.index(module):] + [module]
            raise AssertionError("import cycle: " + " -> ".join(f"fastsgemm.{m}" for m in cycle))
        if module in done:
            return
        path.append(module)
        for other in sorted(graph[module]):
            visit(other)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
