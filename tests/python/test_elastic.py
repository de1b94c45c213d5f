"""TorchElastic (docs/python.md, Elastic training): examples/train_elastic.py under
`torchrun --standalone --nproc_per_node=4 --max_restarts=1` with one worker
SIGKILLed mid-epoch (once, after global step 13, two steps past the last
checkpoint): the agent restarts the group, every rank resumes from rank 0's
checkpoint (the model and every rank's loader.state_dict()), and the batches
the ranks deliver - those of the first run up to the checkpoint, then all of
the restarted run's - hold every sample exactly once per epoch; the steps after
the checkpoint are trained again, none skipped; the final model equals that of
a run without the failure. With plan=regular and with plan=locality (peer
traffic over UCX, the caches cold after the restart)."""
import collections
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.run")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "train_elastic.py")
N, B, P, EPOCHS, EVERY, KILL_AT = 256, 8, 4, 3, 5, 13


def _torchrun(tmp, plan, kill, name):
    log = tmp / ("log-" + name)
    log.mkdir()
    env = dict(os.environ)
    env.pop("LADE_EXAMPLE_KILL", None)
    if kill:
        env["LADE_EXAMPLE_KILL"] = "2:%d" % KILL_AT
        env["LADE_EXAMPLE_KILL_MARKER"] = str(tmp / ("killed-" + name))
    # Debian's torch 1.13 under Python 3.11 needs --redirects/--tee (docs/python.md)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % P,
           "--max_restarts=1", "--redirects", "2", "--tee", "2", EXAMPLE, "--data", str(tmp / "data"),
           "--ckpt", str(tmp / ("ckpt-%s.pt" % name)), "--epochs", str(EPOCHS), "--batch-size", str(B),
           "--every", str(EVERY), "--plan", plan, "--cache-mem-bytes", "20000", "--log", str(log)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return log, out.stdout + out.stderr


def _read(log, rank, restart):
    path = log / ("rank%d.restart%d.jsonl" % (rank, restart))
    return [json.loads(line) for line in open(path)] if path.exists() else []


@pytest.mark.parametrize("plan", ["regular", "locality"])
def test_sigkill_and_restart_every_sample_once(tmp_path, plan):
    subprocess.run([os.environ["LADE_CLI"], "gen", "npy", str(tmp_path / "data"), "--count", str(N), "--shape",
                    "16"], check=True, capture_output=True)
    log, out = _torchrun(tmp_path, plan, True, "killed")
    assert (tmp_path / "killed-killed").exists(), "the worker was not killed"
    assert "resumed at step 10" in out, out[-3000:]  # the group was restarted
    steps = N // (B * P)
    per_epoch = [collections.Counter() for _ in range(EPOCHS)]
    for rank in range(P):
        first, second = _read(log, rank, 0), _read(log, rank, 1)
        resume = [r for r in second if "resume" in r]
        assert len(resume) == 1 and resume[0]["resume"] == KILL_AT // EVERY * EVERY
        g0 = resume[0]["resume"]
        assert resume[0]["position"] == [g0 // steps, g0 % steps]
        batches = [r for r in second if "idx" in r]
        # the first run went past the checkpoint (those steps are trained again), the second starts at it
        assert max(r["g"] for r in first) >= g0 and batches[0]["g"] == g0
        kept = [r for r in first if r["g"] < g0] + batches
        assert [r["g"] for r in kept] == list(range(EPOCHS * steps))
        for r in kept:
            assert (r["epoch"], r["step"]) == divmod(r["g"], steps)
            per_epoch[r["epoch"]].update(r["idx"])
    for e in range(EPOCHS):
        assert per_epoch[e] == collections.Counter(range(N)), "epoch %d: not every sample exactly once" % e
    # the same training as a run without the failure
    _torchrun(tmp_path, plan, False, "clean")
    a = torch.load(tmp_path / "ckpt-killed.pt.final")
    b = torch.load(tmp_path / "ckpt-clean.pt.final")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
