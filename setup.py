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
have_jpeg = os.environ.get("LADE_WITH_JPEG", "AUTO").upper() != "OFF" and any(
    os.path.exists(os.path.join(d, "jpeglib.h")) for d in ("/usr/include", "/usr/local/include"))
if have_jpeg:
    define_macros.append(("LADE_HAVE_JPEG", "1"))
    libraries.append("jpeg")

ext = Extension(
    "lade._lade",
    sources=sources,
    include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")],
    define_macros=define_macros,
    libraries=libraries,
    extra_compile_args=["-std=c11", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
)

setup(
    packages=["lade"],
    package_dir={"": "python"},
    ext_modules=[ext],
)
