"""The Python module under `torchrun --standalone --nproc-per-node=4 -m pytest`
with a gloo process group and no MPI anywhere (tests/ucx/test_ucx.sh): the
loader picks the UCX transport (transport=auto under torchrun with a routed
plan), the module exchanges the UCX addresses through torch.distributed, and
for every planned kind, with the aggregate cache holding the dataset and half
of it: each rank trains on exactly its samples of `lade plan --dump` in
order, its per-epoch cache / peer / storage counts equal the plan's, the sums
over ranks equal `lade simulate`'s, every byte equals the file's, and samples
sent equal samples received."""
import os
import subprocess

import numpy as np
import pytest

dist = pytest.importorskip("torch.distributed")

import lade  # noqa: E402

N, SZ, B, E, SEED = 192, 256, 4, 3, 7
CHARGE = SZ + 64
KINDS = ["regular+lru", "regular+belady", "distcache", "locality", "solar"]


@pytest.fixture(scope="module")
def world():
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    assert "TORCHELASTIC_RUN_ID" in os.environ and "OMPI_COMM_WORLD_SIZE" not in os.environ
    yield dist.get_rank(), dist.get_world_size()
    dist.barrier()
    dist.destroy_process_group()  # else gloo's threads may abort the interpreter's exit (std::terminate)


@pytest.fixture(scope="module")
def data(world):
    rank, _ = world
    root = os.path.join(os.environ.get("LADE_UCX_TMP", "/tmp"), "lade-ucx-py-%s" % os.environ["TORCHELASTIC_RUN_ID"])
    if rank == 0:
        for c in range(4):
            os.makedirs(os.path.join(root, "c%d" % c), exist_ok=True)
            for j in range(N // 4):
                i = c * (N // 4) + j
                with open(os.path.join(root, "c%d" % c, "f%05d.bin" % j), "wb") as f:
                    f.write(bytes((i * 31 + k * 7 + 1) % 256 for k in range(SZ)))
    dist.barrier()
    files = sorted(os.path.join(root, c, f) for c in sorted(os.listdir(root))
                   for f in sorted(os.listdir(os.path.join(root, c))))
    return root, [open(f, "rb").read() for f in files]


def _plan(kind, learners, cache, rpn):
    out = subprocess.run([os.environ["LADE_CLI"], "plan", "--plan", kind, "--samples", str(N), "--learners",
                          str(learners), "--batch-size", str(B), "--epochs", str(E), "--cache", str(cache),
                          "--seed", str(SEED), "--ranks-per-node", str(rpn), "--dump"],
                         check=True, capture_output=True, text=True).stdout
    import json
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _simulate(kind, learners, cache, rpn):
    out = subprocess.run([os.environ["LADE_CLI"], "simulate", "--plan", kind, "--samples", str(N), "--learners",
                          str(learners), "--batch-size", str(B), "--epochs", str(E), "--cache", str(cache),
                          "--seed", str(SEED), "--ranks-per-node", str(rpn)],
                         check=True, capture_output=True, text=True).stdout
    rows, head = {}, None
    for line in out.splitlines():
        w = line.split()
        if w and w[0] == "epoch" and head is None:
            head = w
        elif head and len(w) == len(head) and w[0].isdigit() and int(w[0]) not in rows:
            c = dict(zip(head, w))
            # a rank's peer samples are the other nodes' and its own node's ranks' (handoffs)
            rows[int(w[0])] = (int(c["cache"]), int(c["peer"]) + int(c.get("handoff", 0)), int(c["storage"]))
    return [rows[e] for e in range(E)]


def _read_epochs(L, files):
    """Every batch of E epochs, each sample's bytes checked against its file's: [(epoch, [indices])]."""
    got = []
    for e in range(E):
        for x, _y, m in L:
            idx = [int(i) for i in np.asarray(m.indices)]
            xs = np.asarray(x).reshape(len(idx), -1)
            for i, k in enumerate(idx):
                assert xs[i].tobytes() == files[k], "sample %d: bytes differ from the file's" % k
            got.append((e, idx))
    return got


@pytest.mark.parametrize("half", [False, True], ids=["full", "half"])
@pytest.mark.parametrize("kind", KINDS)
def test_kind_as_planned(world, data, kind, half):
    rank, p = world
    root, files = data
    # the ranks of one machine are one node: the node-aware kinds plan with one
    # cache per node, of cache_mem_bytes (docs/plan.md, Nodes)
    rpn = int(os.environ["LOCAL_WORLD_SIZE"])
    cache = N // p // (2 if half else 1) * rpn
    with lade.Loader(root, transform="raw", raw_size=SZ, batch_size=B, epochs=E, seed=SEED, threads=2,
                     drop_last=True, plan=kind, cache_mem_bytes=cache * CHARGE, peer_timeout_ms=20000,
                     node_cache="off",  # every handoff a UCX message (test_node_cache_handoffs: the shared cache)
                     output="numpy", meta=True) as L:
        got = _read_epochs(L, files)
        stats = L.stats()
        by_epoch = [L.epoch_stats(e)["samples_by_source"] for e in range(E)]
    assert stats["plan_fallbacks"] == 0 and stats["plan_peer_storage"] == 0
    assert stats["ranks_per_node"] == rpn
    plan = [s for s in _plan(kind, p, cache, rpn) if s["learner"] == rank]
    assert [k for _e, idx in got for k in idx] == [k for s in plan for k in s["samples"]]
    want = [[0, 0, 0] for _ in range(E)]
    for s in plan:
        for f in s["from"]:
            want[s["epoch"]][0 if f == "cache" else 1 if f.startswith(("peer", "node")) else 2] += 1
    mine = [(b[1], b[3], b[0]) for b in by_epoch]  # cache, peer, storage
    assert mine == [tuple(w) for w in want], "rank %d: counts %s, the plan's %s" % (rank, mine, want)
    everyone = [None] * p
    dist.all_gather_object(everyone, (mine, stats["peer_messages_sent"]))
    sums = [tuple(sum(r[0][e][k] for r in everyone) for k in range(3)) for e in range(E)]
    assert sums == _simulate(kind, p, cache, rpn)
    assert sum(r[1] for r in everyone) == sum(s[1] for s in sums)  # samples sent = samples received


def test_transport_is_ucx(world, data):
    """The error of a peer routed sample without a transport would not show; the
    peer counter does: under torchrun, transport=auto moved samples between the
    processes, and transport=local with the same plan moves none. The four
    ranks are one node: with a node cache that holds the dataset, a rank
    takes the samples of its share that another rank admitted (handoffs)."""
    root, _ = data
    peer = {}
    for t in ("auto", "local"):
        with lade.Loader(root, transform="raw", raw_size=SZ, batch_size=B, epochs=2, seed=SEED, threads=2,
                         drop_last=True, plan="locality", cache_mem_bytes=N * CHARGE, transport=t, node_cache="off",
                         output="numpy") as L:
            for e in range(2):
                for _ in L:
                    pass
            peer[t] = sum(L.epoch_stats(e)["samples_by_source"][3] for e in range(2))
            storage_for_peer = L.stats()["plan_peer_storage"]
    totals = [None] * dist.get_world_size()
    dist.all_gather_object(totals, (peer["auto"], peer["local"], storage_for_peer))
    assert sum(t[0] for t in totals) > 0 and sum(t[1] for t in totals) == 0 and sum(t[2] for t in totals) > 0


def test_node_cache_handoffs(world, data):
    """The four ranks are one node: with the node's shared cache (node_cache
    auto) locality's intra-node handoffs are read from it, none sent over UCX,
    each rank's counts as the plan routes them (docs/plan.md, Nodes)."""
    rank, p = world
    root, files = data
    rpn = int(os.environ["LOCAL_WORLD_SIZE"])
    cache = N // 2
    with lade.Loader(root, transform="raw", raw_size=SZ, batch_size=B, epochs=E, seed=SEED, threads=2,
                     drop_last=True, plan="locality", cache_mem_bytes=cache * CHARGE, peer_timeout_ms=20000,
                     output="numpy", meta=True) as L:
        _read_epochs(L, files)
        stats = L.stats()
        eps = [L.epoch_stats(e) for e in range(E)]
    want = [[0, 0, 0] for _ in range(E)]  # own, handoff, storage
    for s in _plan("locality", p, cache, rpn):
        if s["learner"] == rank:
            for f in s["from"]:
                want[s["epoch"]][0 if f == "cache" else 1 if f.startswith(("peer", "node")) else 2] += 1
    got = [[e["samples_by_source"][1] - e["plan_node_reads"], e["plan_node_reads"], e["samples_by_source"][0]]
           for e in eps]
    assert got == want, "rank %d: counts %s, the plan's %s" % (rank, got, want)
    assert stats["peer_messages_sent"] == 0 and all(e["samples_by_source"][3] == 0 for e in eps)
    assert stats["plan_fallbacks"] == 0
    handoffs = [None] * p
    dist.all_gather_object(handoffs, stats["plan_node_reads"])
    assert sum(handoffs) > 0
