"""The Python module under `mpirun -np 2 python3 -m pytest` beside mpi4py (which
initialises MPI first, with MPI_THREAD_MULTIPLE): lade.Loader(plan="locality")
takes rank and world from MPI, every step's samples over the ranks are the
regular global batch, values equal np.load, peers send each other cached
samples, and epoch_stats() reports them."""
import collections
import os
import subprocess

import numpy as np
import pytest

mpi4py = pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

import lade  # noqa: E402

COMM = MPI.COMM_WORLD
B, E = 4, 3


@pytest.fixture(scope="module")
def data():
    root = os.path.join(os.environ.get("LADE_MPI_TMP", "/tmp"), "lade-mpi-py-%s" % os.environ.get("OMPI_COMM_WORLD_JOBID", os.getppid()))
    if COMM.rank == 0 and not os.path.isdir(root):
        for c in range(4):
            os.makedirs(os.path.join(root, "c%d" % c), exist_ok=True)
            for j in range(30):
                np.save(os.path.join(root, "c%d" % c, "%03d.npy" % j), np.full((4, 4), c * 100 + j, np.float32))
    COMM.Barrier()
    files = sorted(os.path.join(root, c, f) for c in sorted(os.listdir(root)) for f in sorted(os.listdir(os.path.join(root, c))))
    return root, [np.load(f) for f in files]


def _epochs(loader):
    out = []
    for e in range(E):
        for x, y, m in loader:
            out.append((e, m.step, [int(i) for i in np.asarray(m.indices)], np.array(x)))
    return out


def test_locality_across_ranks(data):
    root, arrays = data
    assert COMM.size == 2
    # a learner per machine: the samples go between the ranks as messages
    with lade.Loader(root, batch_size=B, epochs=E, seed=5, threads=2, drop_last=True, plan="locality",
                     cache_mem_bytes=200000, output="numpy", meta=True, ranks_per_node=1) as L:
        got = _epochs(L)
        stats = L.stats()
        peer = sum(L.epoch_stats(e)["samples_by_source"][3] for e in range(E))
    for _e, _s, idx, x in got:
        for i, k in enumerate(idx):
            np.testing.assert_array_equal(x[i], arrays[k])
    with lade.Loader(root, batch_size=B, epochs=E, seed=5, threads=2, drop_last=True, output="numpy",
                     meta=True) as R:
        reg = _epochs(R)
    mine = collections.Counter((e, s, k) for e, s, idx, _x in got for k in idx)
    regular = collections.Counter((e, s, k) for e, s, idx, _x in reg for k in idx)
    all_mine = sum(COMM.allgather(mine), collections.Counter())
    all_regular = sum(COMM.allgather(regular), collections.Counter())
    assert all_mine == all_regular  # each step: regular's global batch, split by the plan
    sent = COMM.allreduce(stats["peer_messages_sent"])
    received = COMM.allreduce(peer)
    assert sent == received and sent > 0
    assert stats["plan_fallbacks"] == 0 and stats["plan_peer_storage"] == 0


@pytest.mark.parametrize("rpn,node_cache", [(1, "auto"), (2, "off"), (2, "auto")])
def test_distcache_node_handoffs(data, rpn, node_cache):
    """ranks_per_node=2 makes the two ranks one node: every peer sample of the
    node-aware plan is an intra-node handoff; with the node's shared cache
    (node_cache auto) each is read from it (plan_node_reads), with
    node_cache=off sent as a message (peer_samples_node); with 1, none."""
    root, arrays = data
    with lade.Loader(root, batch_size=B, epochs=E, seed=5, threads=2, drop_last=True, plan="distcache",
                     cache_mem_bytes=200000, output="numpy", meta=True, ranks_per_node=rpn,
                     node_cache=node_cache) as L:
        got = _epochs(L)
        stats = L.stats()
        ep = [L.epoch_stats(e) for e in range(E)]
    for _e, _s, idx, x in got:
        for i, k in enumerate(idx):
            np.testing.assert_array_equal(x[i], arrays[k])
    peer = sum(e["samples_by_source"][3] for e in ep)
    node = sum(e["peer_samples_node"] for e in ep)
    shared = sum(e["plan_node_reads"] for e in ep)
    assert stats["peer_samples_node"] == node and stats["peer_bytes_node"] == sum(e["peer_bytes_node"] for e in ep)
    assert stats["plan_node_reads"] == shared
    if rpn == 2 and node_cache == "auto":  # no message: the node's cache
        assert COMM.allreduce(shared) > 0 and peer == 0 and node == 0 and stats["peer_messages_sent"] == 0
    else:
        assert COMM.allreduce(peer) > 0 and shared == 0
        assert node == (peer if rpn == 2 else 0)
    assert stats["plan_fallbacks"] == 0
