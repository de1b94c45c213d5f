"""One rank of `mpirun -np 4 python3 stopped_rank.py DATA`, the loader's
error caught as a training script would catch it (no mpi4py: lade
initialises MPI). test_mpi.sh stops rank 1 with SIGSTOP: the others must
report the peer timeout and the job must end (aborted) within a bound
while rank 1 is still stopped (docs/transport.md, Failure)."""
import sys
import time

import lade

t0 = time.time()
L = lade.Loader(sys.argv[1], plan="distcache", cache_mem_bytes=700000, drop_last=True, epochs=1000, batch_size=8,
                peer_timeout_ms=3000, output="numpy")
n = 0
try:
    for _epoch in range(1000):
        for _batch in L:
            n += 1
except lade.Error as e:
    print("caught after %d batches, %.1f s: %s" % (n, time.time() - t0, e), file=sys.stderr)
    sys.exit(3)
print("ran to the end: the stop was not noticed", file=sys.stderr)
