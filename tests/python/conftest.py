"""Shared fixtures: the lade CLI and small deterministic datasets made with `lade gen`."""
import io
import os
import shutil
import subprocess
import tarfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _find_cli():
    cand = [os.environ.get("LADE_CLI", ""), os.path.join(ROOT, "build", "lade"), shutil.which("lade") or ""]
    for c in cand:
        if c and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="session")
def lade_cli():
    cli = _find_cli()
    if not cli:
        pytest.skip("the lade CLI was not found (set LADE_CLI)")
    return cli


@pytest.fixture(scope="session")
def npy_dir(tmp_path_factory, lade_cli):
    """300 float32 samples of shape 3,8,8 in 10 class folders."""
    d = tmp_path_factory.mktemp("data") / "npy"
    subprocess.run([lade_cli, "gen", "npy", str(d), "--count", "300", "--shape", "3,8,8", "--seed", "5"],
                   check=True, stdout=subprocess.DEVNULL)
    return str(d)


@pytest.fixture(scope="session")
def big_npy_dir(tmp_path_factory, lade_cli):
    """64 samples of 3,224,224 float32 (588 KiB each), for slow-ish loaders."""
    d = tmp_path_factory.mktemp("data") / "big"
    subprocess.run([lade_cli, "gen", "npy", str(d), "--count", "64", "--shape", "3,224,224"],
                   check=True, stdout=subprocess.DEVNULL)
    return str(d)


def list_files(root):
    """The dir source's order: class folders sorted, files sorted; label = class position."""
    files, labels = [], []
    classes = sorted(c for c in os.listdir(root) if os.path.isdir(os.path.join(root, c)) and not c.startswith("."))
    for ci, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if not f.startswith("."):
                files.append(os.path.join(root, c, f))
                labels.append(ci)
    return files, labels


@pytest.fixture(scope="session")
def jpeg_dir(tmp_path_factory, lade_cli):
    """24 synthetic JPEGs in 10 class folders."""
    d = tmp_path_factory.mktemp("data") / "jpeg"
    r = subprocess.run([lade_cli, "gen", "jpeg", str(d), "--count", "24"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        pytest.skip("lade gen jpeg unavailable: " + r.stderr.strip())
    return str(d)


def write_tar(path, members, fmt=tarfile.GNU_FORMAT):
    """A tar shard of (name, bytes) members in that order, with a fixed mtime (the same bytes every run); its
    path as a str."""
    with tarfile.open(path, "w", format=fmt) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
    return str(path)
