"""Checks a pip-installed lade from outside the source tree (run by
tests/pip/test_pip.sh with the fresh virtual environment's python):

- `import lade` is the venv's copy, not python/ or build/python of a checkout;
- lade.features() has every feature named by --require (test.sh: curl mpi,
  which scripts/install-deps.sh installs) and, with --cli, exactly the
  features of that CMake-built `lade --version` (one feature detection);
- a small dataset written here with numpy loads: every sample once per epoch,
  each equal to np.load of its file, with its class folder's label.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--venv", required=True)
ap.add_argument("--require", default="", help="space-separated features the build must have")
ap.add_argument("--cli", help="a CMake-built lade CLI whose features the module must equal")
args = ap.parse_args()

import lade  # noqa: E402

venv = os.path.realpath(args.venv)
where = os.path.realpath(lade.__file__)
assert where.startswith(venv + os.sep), "lade was imported from %s, not from the venv %s" % (where, venv)
assert os.path.realpath(lade._lade.__file__).startswith(venv + os.sep), lade._lade.__file__

feats = lade.features()
missing = set(args.require.split()) - feats
assert not missing, "the pip build lacks %s (it has: %s)" % (" ".join(sorted(missing)), " ".join(sorted(feats)))
if args.cli:
    out = subprocess.run([args.cli, "--version"], check=True, capture_output=True, text=True).stdout
    cmake_feats = set(next(l for l in out.splitlines() if l.startswith("features:")).split()[1:])
    assert feats == cmake_feats, "pip build: %s; CMake build (%s): %s" % (sorted(feats), args.cli, sorted(cmake_feats))

with tempfile.TemporaryDirectory() as d:
    rng = np.random.default_rng(7)
    written = {}
    for c, count in (("ants", 13), ("bees", 11)):
        os.mkdir(os.path.join(d, c))
        for i in range(count):
            p = os.path.join(d, c, "s%02d.npy" % i)
            np.save(p, rng.standard_normal((3, 4)).astype(np.float32))
            written[p] = c
    with lade.Loader(d, batch_size=5, threads=2, output="numpy", meta=True, epochs=1) as loader:
        assert loader.classes == ["ants", "bees"] and len(loader) == 5, (loader.classes, len(loader))
        seen = []
        for data, labels, batch in loader:
            idx = np.frombuffer(batch.indices, dtype=np.int64)
            for k, i in enumerate(idx):
                path, label = loader.samples[int(i)]
                assert label == loader.class_to_idx[written[path]] == int(labels[k])
                assert np.array_equal(data[k], np.load(path)), path
                seen.append(int(i))
        assert sorted(seen) == list(range(24)), seen
    try:
        lade.Loader(os.path.join(d, "absent"), batch_size=1)
        raise AssertionError("a missing dataset did not raise")
    except lade.Error:
        pass

print("pip-installed lade %s at %s: features %s; 24 samples loaded and equal"
      % (lade.version(), os.path.dirname(where), " ".join(sorted(feats))))
