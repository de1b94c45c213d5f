"""A loader across fork(): inert in the child (a clear error; close and exit are
safe), the parent unaffected; torch DataLoader workers are refused with advice.
Each scenario runs in its own interpreter, with a timeout: they used to hang or
crash."""
import os
import signal
import subprocess
import sys

import pytest


def _run(args, timeout):
    """Runs a child in its own session; on a timeout kills it with everything it forked."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail("hung for %d s" % timeout)
    return p.returncode, out, err

FORKED = r"""
import os, sys
import lade
src, how = sys.argv[1], sys.argv[2]
L = lade.Loader(src, batch_size=16, threads=2, epochs=1, shuffle=False, output="numpy", meta=True)
it = L.stream()
data, labels, b = next(it)
first = data.copy()
pid = os.fork()
if pid == 0:
    code = 0
    try:
        next(it)
        code = 3
    except lade.Error as e:
        if "fork" not in str(e) or "threads" not in str(e):
            code = 4
    try:
        L.tell()
        code = 5
    except lade.Error:
        pass
    if not (data == first).all():
        code = 6
    if L.interrupt() is not False:
        code = 7
    del data, labels, b, it
    if how == "close":
        L.close()
    sys.stdout.flush()
    if code:
        os._exit(code)
    sys.exit(0)  # a plain exit: finalisation frees the Loader and the batch
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
rest = [int(b.step) for _, _, b in it]
assert rest == list(range(1, 19)), rest
L.close()
print("ok", flush=True)
"""


@pytest.mark.parametrize("how", ["close", "exit"])
def test_forked_child_loader_is_inert(npy_dir, how):
    rc, out, err = _run([sys.executable, "-c", FORKED, npy_dir, how], 60)
    assert rc == 0, err
    assert out.strip() == "ok"


DATALOADER = r"""
import sys
import torch
from torch.utils.data import DataLoader, IterableDataset
import lade
src, where = sys.argv[1], sys.argv[2]

class Wrapped(IterableDataset):
    def __init__(self):
        self.loader = lade.Loader(src, batch_size=30, threads=1, epochs=1) if where == "parent" else None
    def __iter__(self):
        loader = self.loader or lade.Loader(src, batch_size=30, threads=1, epochs=1)
        for data, labels in loader:
            yield data, labels

n = 0
try:
    for data, labels in DataLoader(Wrapped(), batch_size=None, num_workers=2):
        n += 1
except Exception as e:  # DataLoader re-raises the worker's lade.Error
    print("error:", e)
    sys.exit(0)
print("batches:", n)
sys.exit(1)
"""


@pytest.mark.parametrize("where", ["parent", "worker"])
def test_dataloader_workers_refused(npy_dir, where):
    pytest.importorskip("torch")
    rc, out, err = _run([sys.executable, "-c", DATALOADER, npy_dir, where], 60)
    assert rc == 0, (out, err)  # 10 batches delivered 20 times, or a hang, before
    assert "threads" in out and "DataLoader" in out, out


def test_loader_cannot_be_pickled(npy_dir):
    import pickle

    import lade
    with lade.Loader(npy_dir, batch_size=32, output="numpy") as L:
        with pytest.raises(lade.Error, match="threads"):
            pickle.dumps(L)
