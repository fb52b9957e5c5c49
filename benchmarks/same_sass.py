"""Whether two trees compile a kernel file to the same machine code: the check that a move between the ladder and
the engine (issue 46) changed where code lives and not what the GPU runs.

    python benchmarks/same_sass.py OLD_TREE NEW_TREE kernels/ladder/20_tf32x3.cu [more files] [--arch 90a]

Each file is compiled in each tree with setup.py's nvcc flags for one architecture (by default the file's own
target in setup.py's FILE_ARCHS, else sm_90), and `cuobjdump -sass` lists every kernel's instructions. Kernels are
matched by their instructions, not their names (a move may rename a namespace): the answer is the kernels whose
code appears in one tree and not the other. A file may be named by its path in either tree (a file that moved:
OLD_PATH=NEW_PATH), and either side may be several files whose kernels are taken together (code that moved out
of a rung into the engine: kernels/ladder/16_warptile.cu=kernels/ladder/16_warptile.cu+kernels/engine/warptile.cu;
a kernel both files instantiate counts once). Exit status 0 when every file's kernels are the same, 1 otherwise. Needs nvcc and cuobjdump,
no GPU.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from build_times import setup_constant  # beside this file


def tool(name: str) -> str:
    """A CUDA tool: $NVCC or $CUOBJDUMP, else on PATH or in /usr/local/cuda, else from the nvidia-cuda-* wheels the
    test extras install."""
    found = os.environ.get(name.upper()) or shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")
    for site in ([] if found else sys.path):
        found = next(iter(glob.glob(os.path.join(site, "nvidia", "cu*", "bin", name))), None)
        if found:
            break
    if not found:
        sys.exit(f"same_sass: {name} not found (set ${name.upper()}, or install the test extras)")
    return found


def nvcc_flags(tree: Path) -> tuple[list[str], dict]:
    """setup.py's NVCC_FLAGS and FILE_ARCHS, read from the tree's own setup.py without running it."""
    return setup_constant("NVCC_FLAGS", tree), setup_constant("FILE_ARCHS", tree)


def kernels_of(tree: Path, source: str, arch: str | None, work: Path) -> collections.Counter:
    """The kernels `source` compiles to in `tree`, as a multiset of instruction listings (names and addresses
    left out)."""
    flags, file_archs = nvcc_flags(tree)
    arch = arch or file_archs.get(source, "90")
    obj = work / (source.replace("/", "_") + f".{tree.name}.o")
    subprocess.run([tool("nvcc"), *flags, f"-gencode=arch=compute_{arch},code=sm_{arch}", "-I", str(tree / "kernels"),
                    "-I", str(tree / "csrc"), "-c", str(tree / source), "-o", str(obj)], check=True)
    listing = subprocess.run([tool("cuobjdump"), "-sass", str(obj)], check=True, capture_output=True, text=True).stdout
    kernels, body = collections.Counter(), None
    for line in listing.splitlines():
        if line.strip().startswith("Function :"):
            if body is not None:
                kernels["\n".join(body)] += 1
            body = []
        elif body is not None:
            # "/*0010*/   MOV R1, c[0x0][0x28] ;   /* 0x... */": the instruction alone. Encodings are left out: a
            # relocation (a callee's or a symbol's address) differs with the symbol's name.
            match = re.match(r"\s*/\*[0-9a-f]+\*/\s*(.*?)\s*;", line)
            if match:
                body.append(match.group(1))
    if body is not None:
        kernels["\n".join(body)] += 1
    return kernels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("files", nargs="+", help="kernel files, as paths in the trees (OLD=NEW where one moved)")
    parser.add_argument("--arch", help="e.g. 90a (default: the file's own target in setup.py, else 90)")
    args = parser.parse_args()
    differ = 0
    with tempfile.TemporaryDirectory() as folder:
        for spec in args.files:
            old_path, _, new_path = spec.partition("=")
            old, new = collections.Counter(), collections.Counter()
            for path in old_path.split("+"):
                old |= kernels_of(args.old.resolve(), path, args.arch, Path(folder))
            for path in (new_path or old_path).split("+"):
                new |= kernels_of(args.new.resolve(), path, args.arch, Path(folder))
            gone, came = old - new, new - old
            same = sum((old & new).values())
            verdict = "same" if not gone and not came else "DIFFERENT"
            print(f"{spec}: {verdict}: {same} kernels alike, {sum(gone.values())} only in the old tree, "
                  f"{sum(came.values())} only in the new")
            differ += verdict != "same"
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
