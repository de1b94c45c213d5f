"""Builds the `lade` Python package by driving the CMake build: the sources of
CMakeLists.txt's globs, its LADE_WITH_*=AUTO|ON|OFF detection of the optional
dependencies and its configure summary (shown by `pip install -v`), so a pip
user gets the same lade as `cmake -S . -B build` (S3, http(s):// shards and MPI
when libcurl and Open MPI are installed). Offline, against Debian's packages:

    pip install --no-build-isolation .
    LADE_WITH_MPI=OFF pip install --no-build-isolation .   # any LADE_WITH_X=AUTO|ON|OFF
    LADE_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug" pip install --no-build-isolation .

Needs cmake, a C compiler and python3-dev (scripts/install-deps.sh). CMake
builds in build-pip/cmake, never in the build/ that ctest uses. The extension
links CMake's static, position-independent liblade.a, so the package is
lade/*.py + lade/_lade*.so and nothing else (docs/python.md says why).
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
# CMakeLists.txt's optional dependencies; LADE_WITH_PYTHON is ON here, LADE_WITH_FUZZ its default
OPTIONAL = ("JPEG", "PNG", "CURL", "MPI", "UCX", "HDF5", "ZLIB")


class CMakeExtension(Extension):
    """lade._lade, built by CMake's lade_python target (python/CMakeLists.txt)."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        cmake = shutil.which("cmake")
        if not cmake:
            sys.exit("lade: building the Python module needs cmake (apt-get install cmake, or bash scripts/install-deps.sh)")
        tree = os.path.join(os.path.abspath(self.build_temp), "cmake")
        # every option on every run: the cache would otherwise keep the last pip install's choice
        args = ["-S", ROOT, "-B", tree, "-DCMAKE_BUILD_TYPE=Release", "-DLADE_BUILD_TESTS=OFF",
                "-DLADE_WITH_PYTHON=ON", "-DPython3_EXECUTABLE=" + sys.executable]
        for dep in OPTIONAL:
            args.append("-DLADE_WITH_%s=%s" % (dep, os.environ.get("LADE_WITH_" + dep, "AUTO").upper()))
        args += shlex.split(os.environ.get("LADE_CMAKE_ARGS", ""))
        subprocess.check_call([cmake] + args)
        jobs = self.parallel or os.cpu_count() or 1
        subprocess.check_call([cmake, "--build", tree, "--target", "lade_python", "-j%d" % jobs])

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = glob.glob(os.path.join(tree, "python", "lade", "_lade" + suffix))
        if len(built) != 1:
            sys.exit("lade: CMake built no %s under %s/python/lade" % ("_lade" + suffix, tree))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    packages=["lade"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("lade._lade")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(ROOT, "build-pip")}},
)
