"""Where the build's minutes go: nvcc over each kernels/**/*.cu file in turn, with setup.py's own flags and targets
(FILE_ARCHS where a file names its own), timed one file at a time. Prints one line a file, slowest first, and the
total; --json writes them.

    python benchmarks/build_times.py                  # the portable targets (FASTSGEMM_CUDA_ARCHS=portable)
    python benchmarks/build_times.py --archs 90       # what FASTSGEMM_CUDA_ARCHS=90 builds
"""
import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_constant(name, root=ROOT):
    """A constant of setup.py (that of the tree at `root`) exactly as the build uses it."""
    for node in ast.parse((root / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"setup.py has no {name}")


def setup_function(name):
    """A function of setup.py (gencode_flags), run from its source alone."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    namespace = {"sys": sys}
    exec(compile(ast.Module(body=found, type_ignores=[]), "setup.py", "exec"), namespace)  # noqa: S102: our file
    return namespace[name]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", default="portable", help="as FASTSGEMM_CUDA_ARCHS takes them (a list, or portable)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc is not on PATH")
    sys.path.insert(0, str(ROOT))
    import build_cuda  # the build's own choice of targets

    parse_archs, gencode_flags = build_cuda.parse_archs, setup_function("gencode_flags")
    if args.archs == "portable":
        args.archs = build_cuda.PORTABLE_ARCHS
    file_archs, flags = setup_constant("FILE_ARCHS"), setup_constant("NVCC_FLAGS")
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for source in sorted(ROOT.glob("kernels/**/*.cu")):
            relative = source.relative_to(ROOT).as_posix()
            archs = parse_archs(file_archs.get(relative, args.archs))
            command = [nvcc, *flags, *gencode_flags(archs), "-I", str(ROOT / "kernels"), "-c", str(source), "-o",
                       str(Path(out) / "x.o")]
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            rows.append({"file": relative, "targets": archs, "seconds": round(time.perf_counter() - start, 1)})
    for row in sorted(rows, key=lambda r: -r["seconds"]):
        print(f"{row['seconds']:7.1f} s  {row['file']}  ({';'.join(row['targets'])})")
    print(f"{sum(r['seconds'] for r in rows):7.1f} s  in all, one file at a time")
    if args.json is not None:
        args.json.write_text(json.dumps({"archs": args.archs, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
