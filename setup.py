"""Builds the phalanx wheel (pyproject.toml says what is in it) with CMake.

The build reuses a configured build folder: $PHALANX_BUILD_DIR, else build/ (what
scripts/setup.sh makes). It builds only what the wheel holds: the native modules and the four
programs a cluster runs (phalanx, phalanx-gcs, phalanx-node, phalanx-job-runner).
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = ["phalanx", "phalanx-gcs", "phalanx-node", "phalanx-job-runner"]
STAGING = os.path.join("build", "setuptools")
os.makedirs(os.path.join(ROOT, STAGING), exist_ok=True)


def _copy_stripped(src, dest):
    """A copy of a built file without its debug sections (a RelWithDebInfo build's are most
    of its size), keeping its mode."""
    shutil.copy2(src, dest)
    if shutil.which("strip"):
        subprocess.check_call(["strip", "--strip-debug", dest])


class NativeModule(Extension):
    """A pybind11 module that CMake builds (target `target`) into build/python/phalanx."""

    def __init__(self, name, target, optional=False):
        super().__init__(name, sources=[])
        self.target = target
        self.optional = optional


class CMakeBuild(build_ext):
    def run(self):
        build = os.path.abspath(os.environ.get("PHALANX_BUILD_DIR", os.path.join(ROOT, "build")))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(
                ["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                 "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DPHALANX_BUILD_TESTS=OFF",
                 "-DPHALANX_BUILD_BENCH=OFF"])
        targets = [e.target for e in self.extensions if not e.optional] + PROGRAMS
        if self._configured(build, "phalanx_native_torch"):
            targets.append("phalanx_native_torch")
        jobs = os.environ.get("JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target", *targets])
        for ext in self.extensions:
            built = self._built(build, ext)
            if built is None:
                if ext.optional:
                    continue
                sys.exit(f"setup.py: CMake built no {ext.name} in {build}/python/phalanx")
            dest = self.get_ext_fullpath(ext.name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            _copy_stripped(built, dest)
        bin_dir = os.path.join(self.build_lib, "phalanx", "_bin")
        os.makedirs(bin_dir, exist_ok=True)
        for program in PROGRAMS:
            _copy_stripped(os.path.join(build, "bin", program), os.path.join(bin_dir, program))

    @staticmethod
    def _configured(build, target):
        out = subprocess.run(["cmake", "--build", build, "--target", "help"],
                             capture_output=True, text=True).stdout
        return any(line.split(":")[0] == target for line in out.splitlines())

    @staticmethod
    def _built(build, ext):
        folder = os.path.join(build, "python", "phalanx")
        leaf = ext.name.rpartition(".")[2]
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            if name.startswith(leaf + ".") and name.endswith(".so"):
                return os.path.join(folder, name)
        return None


setup(
    package_dir={"": "python"},
    packages=find_packages("python", include=["phalanx", "phalanx.*"]),
    package_data={"phalanx.horovod": ["_shim/horovod/*.py", "_shim/horovod/torch/*.py"]},
    ext_modules=[NativeModule("phalanx._native", "phalanx_native"),
                 NativeModule("phalanx._native_torch", "phalanx_native_torch", optional=True)],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own staging and metadata go inside CMake's build folder, not into python/
    # (a phalanx.egg-info there would tell pip, on a path with python/, that it is installed).
    options={"build": {"build_base": STAGING}, "egg_info": {"egg_base": STAGING}},
    zip_safe=False,
)
