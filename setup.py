"""Build fastsgemm's extension: nvcc compiles kernels/**/*.cu (the ladder's
rungs in kernels/ladder/, the engine's configurations in kernels/engine/,
support code in kernels/support/), the C compiler
compiles csrc/*.c and kernels/**/*.c, and one shared object links them with
the CUDA runtime (static). cuBLAS is not linked: the module opens it on first
use (kernels/support/cublas.c).

Environment:
  FASTSGEMM_CUDA        where CUDA comes from: auto (default), toolkit or pypi
                        (build_cuda.py says what each means).
  FASTSGEMM_CUDA_ARCHS  GPU architectures: "native" (the default) builds for
                        the GPUs this machine has, or, where it has none,
                        "portable": sm_80 and sm_90 machine code (every
                        Ampere, Ada and Hopper GPU runs one of them) and PTX
                        that later GPUs compile at load time. A list such as
                        "90" or "80;86;89;90" names them; PTX of the newest
                        is always added.
  CUDA_HOME             where the CUDA toolkit is, when nvcc is not on PATH.
"""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()
sys.path.insert(0, str(ROOT))
import build_cuda  # noqa: E402: next to this file; the PEP 517 backend makes the same choice of CUDA


# Files that need other targets than the default list, e.g. Hopper-only
# instructions (wgmma needs sm_90a): {"kernels/ladder/NN_name.cu": "90a"}. Their
# launchers check the device's compute capability before they launch.
FILE_ARCHS = {"kernels/ladder/19_tf32.cu": "90a", "kernels/ladder/20_tf32x3.cu": "90a",
              "kernels/ladder/21_tf32x3_regs.cu": "90a", "kernels/ladder/24_ozaki.cu": "90a",
              "kernels/ladder/22_tf32x3_inplace.cu": "90a", "kernels/ladder/23_tf32_tma.cu": "90a",
              "kernels/engine/tf32x3_direct.cu": "90a", "kernels/engine/tf32x3_regs_direct.cu": "90a",
              "kernels/engine/tf32x3_128x64.cu": "90a", "kernels/engine/tf32x3_regs_4steps.cu": "90a",
              "kernels/engine/ozaki.cu": "90a", "kernels/engine/tf32.cu": "90a", "kernels/engine/tf32x3.cu": "90a",
              "kernels/engine/tf32x3_regs.cu": "90a", "kernels/engine/tf32x3_inplace.cu": "90a",
              "kernels/engine/tf32_tma.cu": "90a"}

# Hidden by default: the module exports PyInit__sgemm alone (PyMODINIT_FUNC marks it), so none of its helpers can
# clash with, or be bound to, another library's symbols of the same name in the process.
NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
              "-Wno-deprecated-gpu-targets"]
C_FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers", "-fvisibility=hidden",
           "-Werror=implicit-function-declaration"]


def find_runtime_requirements():
    """numpy's aside: nvidia-cublas where CUDA comes from the wheels (pyproject.toml's dynamic dependencies)."""
    try:
        return build_cuda.runtime_requirements()
    except build_cuda.CudaNotFound as e:
        sys.exit(str(e))


def find_cuda():
    """(root, from_wheels), or the build stops with what to do."""
    try:
        return build_cuda.cuda_home()
    except build_cuda.CudaNotFound as e:
        sys.exit(str(e))


def gencode_flags(archs):
    """Machine code for every arch, PTX for the newest."""
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    newest = max(archs, key=lambda a: int(a.rstrip("a")))
    flags.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return flags


class BuildWithNvcc(build_ext):
    def build_extension(self, ext):
        cuda, from_wheels = find_cuda()
        nvcc = cuda / "bin" / "nvcc"
        print(f"fastsgemm: building with {'the CUDA wheels' if from_wheels else 'the CUDA Toolkit'} in {cuda} "
              f"(nvcc: {nvcc})", flush=True)
        try:
            archs, why = build_cuda.choose_archs(nvcc)
        except build_cuda.CudaNotFound as e:
            sys.exit(str(e))
        print(f"fastsgemm: building for {', '.join('sm_' + a for a in archs)} and PTX of the newest: {why}",
              flush=True)
        lib_dir = build_cuda.library_dir(cuda)
        ext.include_dirs += [str(cuda / "include")]
        ext.library_dirs += [str(lib_dir)]
        # What this build covers, inside the module (_sgemm.build_info()): python -m fastsgemm says it, and names a
        # GPU it misses. A JSON text as a C string literal (JSON's escapes are C's for ASCII).
        info = {"archs": archs, "ptx": max(archs, key=lambda a: int(a.rstrip("a"))), "why": why}
        ext.define_macros += [("FSG_BUILD_INFO", json.dumps(json.dumps(info, ensure_ascii=True)))]
        if not from_wheels:  # cuBLAS is looked for in the Toolkit too (the wheel's is found from Python)
            ext.define_macros += [("FSG_TOOLKIT_LIB_DIR", f'"{lib_dir}"')]

        out_dir = Path(self.build_temp) / "cuda"
        out_dir.mkdir(parents=True, exist_ok=True)
        # Objects and the module built with another CUDA, other architectures or other flags are stale even when
        # newer than the sources: the record of what built them decides (switching FASTSGEMM_CUDA in one checkout).
        built_with = json.dumps({"cuda": str(cuda), "from_wheels": from_wheels, "archs": archs,
                                 "nvcc_flags": NVCC_FLAGS, "c_flags": C_FLAGS, "macros": ext.define_macros})
        record = Path(self.build_temp) / "built_with.json"
        if not record.exists() or record.read_text() != built_with:
            self.force = True
        # A rung includes the rung before it (and headers): any change under kernels/ rebuilds every CUDA file.
        inputs = [p for p in ROOT.glob("kernels/**/*") if p.suffix in (".h", ".cuh", ".cu")]
        newest_input = max((p.stat().st_mtime for p in inputs), default=0)
        jobs = []
        for source in sorted(ROOT.glob("kernels/**/*.cu")):
            relative = source.relative_to(ROOT).as_posix()
            file_archs = build_cuda.parse_archs(FILE_ARCHS[relative]) if relative in FILE_ARCHS else archs
            obj = out_dir / (relative.removeprefix("kernels/").replace("/", "_").removesuffix(".cu") + ".o")
            ext.extra_objects.append(str(obj))
            if obj.exists() and obj.stat().st_mtime > newest_input and not self.force:
                continue
            command = [str(nvcc), *NVCC_FLAGS, *gencode_flags(file_archs), "-I", str(ROOT / "kernels"),
                       "-c", str(source), "-o", str(obj)]
            jobs.append(command)

        def run(command):
            print(" ".join(command), flush=True)
            done = subprocess.run(command, capture_output=True, text=True)
            return command, done

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for command, done in pool.map(run, jobs):
                sys.stdout.write(done.stdout)
                sys.stderr.write(done.stderr)
                if done.returncode != 0:
                    sys.exit(f"fastsgemm: nvcc failed on {command[-3]} (exit code {done.returncode}); "
                             "its messages are above.")
        # setuptools relinks only when a source or a dependency is newer than the module: the CUDA objects count.
        ext.depends = [*ext.depends, *ext.extra_objects]
        super().build_extension(ext)
        record.write_text(built_with)



extension = Extension(
    "fastsgemm._sgemm",
    sources=sorted(p.relative_to(ROOT).as_posix() for p in (*ROOT.glob("csrc/*.c"), *ROOT.glob("kernels/**/*.c"))),
    include_dirs=["csrc", "kernels"],
    libraries=["cudart_static", "stdc++", "dl", "rt", "pthread"],
    extra_compile_args=C_FLAGS,
    # Symbols that static archives bring (the CUDA runtime's, and C++ runtime pieces where a toolchain links them
    # statically) stay inside the module, as -fvisibility=hidden keeps ours: it exports PyInit__sgemm alone.
    extra_link_args=["-Wl,--exclude-libs,ALL"],
    depends=[p.relative_to(ROOT).as_posix() for p in (*ROOT.glob("csrc/*.h"), *ROOT.glob("kernels/**/*.h"))],
)

setup(
    ext_modules=[extension],
    cmdclass={"build_ext": BuildWithNvcc},
    install_requires=["numpy>=1.22", *find_runtime_requirements()],
)
