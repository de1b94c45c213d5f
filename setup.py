"""Builds the `lade` Python package offline: the extension is compiled from the C
sources of src/ plus python/src/_lade.c (no CMake needed).

    pip install --no-build-isolation .
"""
import glob
import os

from setuptools import Extension, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
MODULES = ("core", "source", "transform", "plan", "cache", "dist", "engine", "model")


def rel(p):
    return os.path.relpath(p, ROOT)


sources = [rel(os.path.join(ROOT, "python", "src", "_lade.c"))]
for m in MODULES:
    sources += sorted(rel(p) for p in glob.glob(os.path.join(ROOT, "src", m, "*.c")))

define_macros = [("_GNU_SOURCE", "1")]
libraries = ["m", "pthread"]


def found(dep, header):
    return os.environ.get("LADE_WITH_" + dep, "AUTO").upper() != "OFF" and any(
        os.path.exists(os.path.join(d, header)) for d in ("/usr/include", "/usr/local/include"))


# The same generated header as CMake's (src/lade_build_config.h.in), force-included.
have = {"JPEG": found("JPEG", "jpeglib.h"), "PNG": found("PNG", "spng.h"), "CURL": False, "MPI": False,
        "HDF5": found("HDF5", "hdf5/serial/hdf5.h")}
have["ZLIB"] = have["HDF5"] and found("ZLIB", "zlib.h")
if have["JPEG"]:
    libraries.append("jpeg")
if have["PNG"]:
    libraries.append("spng")
include_dirs, library_dirs = [], []
if have["HDF5"]:  # Debian's serial libhdf5 (libhdf5-dev)
    include_dirs.append("/usr/include/hdf5/serial")
    library_dirs.append("/usr/lib/%s/hdf5/serial" % os.popen("gcc -dumpmachine").read().strip())
    libraries.append("hdf5")
if have["ZLIB"]:
    libraries.append("z")
GEN = os.path.join(ROOT, "build", "setup-generated")
os.makedirs(GEN, exist_ok=True)
with open(os.path.join(ROOT, "src", "lade_build_config.h.in")) as f:
    text = f.read()
for dep, on in have.items():
    text = text.replace("#cmakedefine LADE_HAVE_%s 1" % dep,
                        "#define LADE_HAVE_%s 1" % dep if on else "/* #undef LADE_HAVE_%s */" % dep)
with open(os.path.join(GEN, "lade_build_config.h"), "w") as f:
    f.write(text)

ext = Extension(
    "lade._lade",
    sources=sources,
    include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")] + include_dirs,
    library_dirs=library_dirs,
    define_macros=define_macros,
    libraries=libraries,
    extra_compile_args=["-include", os.path.join(GEN, "lade_build_config.h"), "-std=c11", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
)

setup(
    packages=["lade"],
    package_dir={"": "python"},
    ext_modules=[ext],
)
