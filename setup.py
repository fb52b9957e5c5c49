"""Build fastsgemm's extension: nvcc compiles kernels/*.cu, the C compiler
compiles csrc/*.c and kernels/*.c, and one shared object links them with the
CUDA runtime (static) and cuBLAS.

Environment:
  FASTSGEMM_CUDA_ARCHS  GPU architectures, e.g. "90" or "80;90" (default
                        "80;86;89;90": Ampere, Ada and Hopper machine code,
                        plus PTX of the newest so later GPUs can JIT it).
  CUDA_HOME             where the CUDA toolkit is, when nvcc is not on PATH.
"""
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()
DEFAULT_ARCHS = "80;86;89;90"

# Files that need other targets than the default list, e.g. Hopper-only
# instructions (wgmma needs sm_90a): {"kernels/NN_name.cu": "90a"}. Their
# launchers check the device's compute capability before they launch.
FILE_ARCHS = {}

NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "-Wno-deprecated-gpu-targets"]
C_FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]


def find_cuda_home():
    """The toolkit root: nvcc on PATH, else CUDA_HOME or CUDA_PATH, else /usr/local/cuda."""
    nvcc = shutil.which("nvcc")
    if nvcc:
        return Path(nvcc).resolve().parent.parent
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "bin" / "nvcc").exists():
            return Path(candidate)
    sys.exit(
        "fastsgemm: cannot find the CUDA compiler nvcc (looked on PATH, in $CUDA_HOME, $CUDA_PATH and "
        "/usr/local/cuda). Install the CUDA Toolkit (12.0 or newer) and put its bin/ on PATH, or set CUDA_HOME."
    )


def parse_archs(text):
    archs = [a.strip().lower().removeprefix("sm_") for a in text.replace(",", ";").split(";") if a.strip()]
    for a in archs:
        if not (a.rstrip("a").isdigit()):
            sys.exit(f"fastsgemm: FASTSGEMM_CUDA_ARCHS has '{a}', expected numbers such as 80;86;89;90 or 90a")
    return archs


def gencode_flags(archs):
    """Machine code for every arch, PTX for the newest."""
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    newest = max(archs, key=lambda a: int(a.rstrip("a")))
    flags.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return flags


class BuildWithNvcc(build_ext):
    def build_extension(self, ext):
        cuda = find_cuda_home()
        nvcc = cuda / "bin" / "nvcc"
        archs = parse_archs(os.environ.get("FASTSGEMM_CUDA_ARCHS", DEFAULT_ARCHS))
        lib_dir = cuda / "lib64" if (cuda / "lib64").exists() else cuda / "lib"
        ext.include_dirs += [str(cuda / "include")]
        ext.library_dirs += [str(lib_dir)]
        ext.runtime_library_dirs += [str(lib_dir)]

        out_dir = Path(self.build_temp) / "cuda"
        out_dir.mkdir(parents=True, exist_ok=True)
        headers = sorted(ROOT.glob("kernels/*.h")) + sorted(ROOT.glob("kernels/*.cuh"))
        newest_header = max((h.stat().st_mtime for h in headers), default=0)
        jobs = []
        for source in sorted(ROOT.glob("kernels/*.cu")):
            relative = source.relative_to(ROOT).as_posix()
            file_archs = parse_archs(FILE_ARCHS[relative]) if relative in FILE_ARCHS else archs
            obj = out_dir / (source.stem + ".o")
            ext.extra_objects.append(str(obj))
            if obj.exists() and obj.stat().st_mtime > max(source.stat().st_mtime, newest_header) and not self.force:
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
        super().build_extension(ext)


extension = Extension(
    "fastsgemm._sgemm",
    sources=sorted(p.relative_to(ROOT).as_posix() for p in (*ROOT.glob("csrc/*.c"), *ROOT.glob("kernels/*.c"))),
    include_dirs=["csrc", "kernels"],
    libraries=["cudart_static", "cublas", "stdc++", "dl", "rt", "pthread"],
    extra_compile_args=C_FLAGS,
    depends=[p.relative_to(ROOT).as_posix() for p in (*ROOT.glob("csrc/*.h"), *ROOT.glob("kernels/*.h"))],
)

setup(ext_modules=[extension], cmdclass={"build_ext": BuildWithNvcc})
