"""Ctrl-C while iterating raises KeyboardInterrupt promptly and the process exits cleanly."""
import os
import signal
import subprocess
import sys
import time

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


def test_interrupt_method_is_harmless(npy_dir):
    import lade
    with lade.Loader(npy_dir, batch_size=32, output="numpy") as L:
        L.interrupt()  # nothing blocked: the next call still works (a stale interrupt is retried)
        assert sum(1 for _ in L) == 10
