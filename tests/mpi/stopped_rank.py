"""One rank of `mpirun -np 4 python3 stopped_rank.py DATA STOP_RANK`, the
loader's error caught as a training script would catch it (no mpi4py: lade
initialises MPI). Rank STOP_RANK stops itself (SIGSTOP) after 50 batches,
with a helper that continues it 45 s later; the others must report the
peer timeout, and the job must end (aborted) within a bound while that
rank is still stopped (docs/transport.md, Failure)."""
import os
import signal
import subprocess
import sys
import time

import lade

t0 = time.time()
stop = os.environ.get("OMPI_COMM_WORLD_RANK") == sys.argv[2]
# node_cache off: every handoff a message, so the others need rank 1 (test_mpi.sh says why)
L = lade.Loader(sys.argv[1], plan="distcache", cache_mem_bytes=700000, drop_last=True, epochs=1000, batch_size=8,
                peer_timeout_ms=3000, output="numpy", node_cache="off")
n = 0
try:
    for _epoch in range(1000):
        for _batch in L:
            n += 1
            if stop and n == 50:  # stopped once its loader runs, not while MPI starts
                subprocess.Popen(["sh", "-c", "sleep 45; kill -CONT %d" % os.getpid()], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
                os.kill(os.getpid(), signal.SIGSTOP)
except lade.Error as e:
    print("caught after %d batches, %.1f s:" % (n, time.time() - t0), e, file=sys.stderr)
    sys.exit(3)
print("ran to the end: the stop was not noticed", file=sys.stderr)
