"""Ctrl-C and Loader.interrupt(): nothing lost, nothing duplicated, nothing left over.

A batch taken from the engine is either handed to the caller or put back;
tell()/state_dict() count a put-back batch as not consumed."""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import lade

CHILD = r"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
import lade
L = lade.Loader(sys.argv[1], batch_size=32, threads=1, epochs=1000000, prefetch=1, output="numpy")
n = 0
try:
    for data, labels in L.stream():
        n += 1
        if n == 3:
            print("iterating", flush=True)
except KeyboardInterrupt:
    L.close()
    print("stopped after", n, flush=True)
    sys.exit(42)
"""


def test_sigint_stops_iteration(big_npy_dir):
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", CHILD, big_npy_dir], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "iterating"
        time.sleep(0.3)
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 42, err
    assert out.startswith("stopped after"), out
    assert took < 2.0
    assert "Traceback" not in err


def test_interrupt_with_nobody_waiting_does_nothing(npy_dir):
    with lade.Loader(npy_dir, batch_size=32, output="numpy") as L:
        assert L.interrupt() is False  # nothing waited: no effect, and it is not held over
        assert sum(1 for _ in L) == 10
        assert L.interrupt() is False


# The child iterates with SIGINTs arriving at random times. mode "continue":
# after each KeyboardInterrupt it iterates on (stream() or iter() of the
# epoch); mode "resume": it saves state_dict(), closes the loader and
# continues with a new loader from load_state_dict(). It prints every batch it
# received as (epoch, step, first index).
SIGNALLED = r"""
import json, signal, sys
import lade
src, mode, output = sys.argv[1], sys.argv[2], sys.argv[3]
armed = [False]
def on_sigint(sig, frame):
    if armed[0]:  # not while handling the last one
        armed[0] = False
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)
def make():
    return lade.Loader(src, batch_size=16, threads=1, prefetch=1, epochs=50, seed=7, output=output, meta=True)
L = make()
seen, interrupts = [], 0
print("ready", flush=True)
epoch = 0
while True:
    try:
        armed[0] = True
        if mode == "epochs":
            while epoch < 50:
                for data, labels, b in L:
                    seen.append((b.epoch, b.step, b.indices[0]))
                epoch += 1
        else:
            for data, labels, b in L.stream():
                seen.append((b.epoch, b.step, b.indices[0]))
        armed[0] = False
        break
    except KeyboardInterrupt:
        interrupts += 1
        if mode == "epochs" and not L.interrupted:
            # the signal hit this loop's body, not lade: a new iter() would
            # start the epoch again (as after break), so resume explicitly
            L.seek(*L.tell())
        if mode == "resume":
            state = L.state_dict()
            L.close()
            L = make()
            L.load_state_dict(state)
signal.signal(signal.SIGINT, signal.SIG_IGN)
print(json.dumps({"seen": seen, "interrupts": interrupts}), flush=True)
"""


def _reference(src, output):
    with lade.Loader(src, batch_size=16, threads=1, prefetch=1, epochs=50, seed=7, output=output,
                     meta=True) as L:
        return [[b.epoch, b.step, b.indices[0]] for _, _, b in L.stream()]


@pytest.mark.parametrize("mode,output", [("continue", "numpy"), ("continue", "torch"), ("epochs", "numpy"),
                                         ("resume", "numpy")])
def test_sigints_lose_and_repeat_no_batch(big_npy_dir, mode, output):
    if output == "torch":
        pytest.importorskip("torch")
    want = _reference(big_npy_dir, output)
    assert len(want) == 200
    rng = random.Random(hash((mode, output)) & 0xffff)
    p = subprocess.Popen([sys.executable, "-c", SIGNALLED, big_npy_dir, mode, output], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    sent = 0
    try:
        assert p.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while p.poll() is None and sent < 400 and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.002, 0.02))
            p.send_signal(signal.SIGINT)
            sent += 1
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got["interrupts"] >= 8, (sent, got["interrupts"])
    assert got["seen"] == want  # every batch exactly once, in order


def test_interrupt_from_thread_wakes_the_waiting_next(big_npy_dir):
    # the first interrupt() used to be swallowed (taken for a stale one)
    with lade.Loader(big_npy_dir, batch_size=8, threads=1, prefetch=1, epochs=4, output="numpy",
                     meta=True) as L:
        want = [(e, s) for e in range(4) for s in range(8)]
        seen, woke, errors = [], [], []
        handled = threading.Event()
        stop = threading.Event()

        def interrupter():
            deadline = time.monotonic() + 20
            while not stop.is_set() and time.monotonic() < deadline and len(woke) < 3:
                if L.interrupt():
                    woke.append(1)
                    handled.wait(20)  # one interrupt per wait: the next one waits for the error
                    handled.clear()
                time.sleep(0.0002)

        t = threading.Thread(target=interrupter)
        t.start()
        try:
            while True:
                try:
                    for _, _, b in L.stream():
                        seen.append((b.epoch, b.step))
                    break
                except lade.Error as e:
                    errors.append(e.name)
                    handled.set()
        finally:
            stop.set()
            handled.set()
            t.join()
        assert woke, "interrupt() never found a waiting next()"
        assert errors == ["LADE_EINTR"] * len(woke)  # each interrupt() that returned True stopped a next()
        assert seen == want  # and took no batch
        assert L.interrupt() is False


CTRL_C_IN_TORCH_IMPORT = r"""
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)


class SigintInsideTorchC:
    # SIGINT at the first import torch._C's initialisation makes: what a Ctrl-C during the
    # seconds `import torch` takes inside Loader() does
    armed = fired = False

    def find_spec(self, name, path, target=None):
        if name == "torch._C":
            SigintInsideTorchC.armed = True
        elif SigintInsideTorchC.armed and not SigintInsideTorchC.fired:
            SigintInsideTorchC.fired = True
            signal.raise_signal(signal.SIGINT)
        return None


sys.meta_path.insert(0, SigintInsideTorchC())
import lade
assert "torch" not in sys.modules
try:
    lade.Loader(sys.argv[1], batch_size=4)
except KeyboardInterrupt as e:
    print("KeyboardInterrupt", SigintInsideTorchC.fired, repr(e.__context__))
    sys.exit(0)
except BaseException as e:
    print("other", type(e).__name__, str(e).splitlines()[0])
    sys.exit(1)
print("created", SigintInsideTorchC.fired)
sys.exit(2)
"""


def test_ctrl_c_while_loader_imports_torch(npy_dir):
    """Ctrl-C while Loader() imports torch (the user had not) is a plain KeyboardInterrupt, not torch's
    RuntimeError('KeyboardInterrupt: <EMPTY MESSAGE>')."""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", CTRL_C_IN_TORCH_IMPORT, npy_dir], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("KeyboardInterrupt True"), (r.stdout, r.stderr[-2000:])
