"""`lade dlio` (docs/dlio.md): DLIO's workload files parse with their values, DLIO's metrics recomputed from the
per-step log with DLIO's formulas equal what lade reports, and under mpirun and torchrun every rank runs the same
steps behind a barrier that holds, each sample once per epoch under DLIO's sharding."""
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKLOADS = os.path.join(ROOT, "tests", "dlio", "workloads")
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))


def run(cli, *args, check=True, env=None, timeout=300):
    out = subprocess.run([cli, "dlio"] + [str(a) for a in args], capture_output=True, text=True, env=env,
                         timeout=timeout)
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def show(cli, *args):
    out = run(cli, "show", *args)
    kv = {}
    for line in out.stdout.splitlines():
        for m in re.finditer(r"(\w+)=(\S+)", line):
            kv[m.group(1)] = m.group(2)
    return kv, out.stderr


# ---------------------------------------------------------------- the configuration

@pytest.mark.parametrize("name,values", [
    ("unet3d_h100", dict(format="npz", num_files_train="168", num_samples_per_file="1", batch_size="7",
                         read_threads="4", data_loader="pytorch", epochs="5", au="0.90000000000000002",
                         record_length_bytes="146600628", record_length_bytes_stdev="68341808",
                         record_length_bytes_resize="2097152", data_folder="data/unet3d")),
    ("unet3d_a100", dict(format="npz", num_files_train="168", batch_size="7")),
    ("resnet50_h100", dict(format="tfrecord", num_files_train="1024", num_samples_per_file="1251",
                           batch_size="400", read_threads="8", data_loader="tensorflow",
                           record_length_bytes="114660.07000000001", data_folder="data/resnet50")),
    ("resnet50_a100", dict(format="tfrecord", num_files_train="1024", batch_size="400")),
    ("cosmoflow_h100", dict(format="tfrecord", num_files_train="524288", batch_size="1", shuffle_size="2",
                            sample_shuffle="1", au="0.69999999999999996", record_length_bytes_stdev="71311")),
    ("cosmoflow_a100", dict(format="tfrecord", num_files_train="524288")),
])
def test_workload_files_parse_with_their_values(lade_cli, name, values):
    kv, err = show(lade_cli, os.path.join(WORKLOADS, name + ".yaml"))
    for k, v in values.items():
        assert kv.get(k) == v, (name, k, kv.get(k), v)
    ct = {"unet3d_h100": 0.323, "unet3d_a100": 0.636, "resnet50_h100": 0.224, "resnet50_a100": 0.435,
          "cosmoflow_h100": 0.0035, "cosmoflow_a100": 0.00551}[name]
    assert re.search(r"computation_time=fixed\(mean=([0-9.e-]+)", show(lade_cli, os.path.join(WORKLOADS, name +
                                                                                                 ".yaml"))[0] and
                     "" or "") is None or True
    out = run(lade_cli, "show", os.path.join(WORKLOADS, name + ".yaml")).stdout
    m = re.search(r"computation_time=fixed\(mean=([0-9.e-]+)", out)
    assert m and float(m.group(1)) == ct, out
    if name.startswith("unet3d"):  # checkpointing is named, never silently ignored
        assert "workflow.checkpoint" in err and "not emulated" in err, err
        assert "checkpoint.checkpoint_folder" in err, err
    else:
        assert "unknown key" not in err, err


def test_overrides_and_hydra_spelling(lade_cli):
    kv, _ = show(lade_cli, os.path.join(WORKLOADS, "unet3d_h100.yaml"), "dataset.num_files_train=64",
                 "++workload.reader.batch_size=3", "dataset.data_folder=s3://bucket/unet3d/", "lade.plan=locality")
    assert kv["num_files_train"] == "64" and kv["batch_size"] == "3"
    assert kv["data_folder"] == "s3://bucket/unet3d" and kv["plan"] == "locality"


def test_unknown_key_warns_naming_it(lade_cli, tmp_path):
    y = tmp_path / "w.yaml"
    y.write_text("dataset:\n  format: npz\n  num_fils_train: 3\nreader:\n  batch_size: 2\n")
    kv, err = show(lade_cli, str(y))
    assert "unknown key dataset.num_fils_train (line 3)" in err, err
    assert kv["num_files_train"] == "8"  # DLIO's default stands


@pytest.mark.parametrize("override,needle", [
    ("dataset.num_files_train=abc", "dataset.num_files_train (override): 'abc' is not a whole number"),
    ("reader.data_loader=jax", "reader.data_loader (override): 'jax' is not one of pytorch|tensorflow"),
    ("dataset.format=hdf5", "dataset.format (override): 'hdf5' is not one of npz|tfrecord"),
    ("workflow.train=maybe", "workflow.train (override): 'maybe' is not a boolean"),
    ("metric.au=90", "metric.au: 90 is more than 1"),
    ("train.computation_time.type=lognormal", "train.computation_time.type: 'lognormal' is not one of"),
    ("reader.batch_size", "override 'reader.batch_size' is not KEY=VALUE"),
])
def test_bad_value_is_an_error_naming_key_and_value(lade_cli, override, needle):
    out = run(lade_cli, "show", os.path.join(WORKLOADS, "unet3d_h100.yaml"), override, check=False)
    assert out.returncode == 2 and needle in out.stderr, out.stderr


def test_bad_yaml_names_the_line(lade_cli, tmp_path):
    y = tmp_path / "bad.yaml"
    y.write_text("dataset:\n  format: npz\n   bad: [\n")
    out = run(lade_cli, "show", str(y), check=False)
    assert out.returncode == 2 and "bad.yaml: line" in out.stderr, out.stderr


# ---------------------------------------------------------------- DLIO's metrics from the log

def dlio_metrics(steps_csv, batch, exclude_start=1, exclude_end=0):
    """DLIO's compute_metrics_train (utils/statscounter.py) per epoch, from one rank's per-step log."""
    rows = list(csv.DictReader(open(steps_csv)))
    out = {}
    for e in sorted({int(r["epoch"]) for r in rows}):
        rs = [r for r in rows if int(r["epoch"]) == e]
        n = len(rs)
        compute = [float(r["compute_s"]) for r in rs]
        proc = [float(r["proc_s"]) for r in rs]
        t0, t1 = float(rs[0]["block_start_s"]), float(rs[0]["block_end_s"])
        s0, e0 = exclude_start, n - 1 - exclude_end
        total_compute = np.sum(compute[s0:e0 + 1])
        total_time = t1 - t0 - np.sum(proc[:s0]) - np.sum(proc[e0 + 1:])
        au = 0.0 if total_compute == 0 else total_compute / total_time
        tp = (n - 2) / total_time * batch
        out[e] = (au * 100, tp)
    return out


def datagen(cli, folder, fmt, files, spf, rl, stdev, extra=()):
    args = ["datagen", "dataset.format=" + fmt, "dataset.data_folder=" + str(folder), "dataset.num_files_train=%d" %
            files, "dataset.num_samples_per_file=%d" % spf, "dataset.record_length_bytes=%d" % rl,
            "dataset.record_length_bytes_stdev=%d" % stdev, "workflow.generate_data=True"] + list(extra)
    run(cli, *args)


def check_metrics(out_dir, world, batch, record_length, stdout, au_pass=90):
    summ = json.load(open(os.path.join(out_dir, "summary.json")))
    m = summ["metric"]
    per = [dlio_metrics(os.path.join(out_dir, "%d_steps.csv" % r), batch) for r in range(world)]
    epochs = sorted(per[0])
    au = [np.mean([per[r][e][0] for r in range(world)]) for e in epochs]
    tp = [np.sum([per[r][e][1] for r in range(world)]) for e in epochs]
    # the log is written with 9 decimals: the figures agree to the printed digit
    np.testing.assert_allclose(m["train_au_percentage"], au, rtol=0, atol=1e-5)
    np.testing.assert_allclose(m["train_throughput_samples_per_second"], tp, rtol=1e-6)
    assert abs(m["train_au_mean_percentage"] - np.mean(au)) < 1e-5
    assert abs(m["train_au_stdev_percentage"] - np.std(au)) < 1e-5
    assert abs(m["train_io_mean_MB_per_second"] - np.mean(tp) * record_length / 1024 / 1024) < 1e-4 * max(1, np.mean(tp))
    line = "[METRIC] Training Accelerator Utilization [AU] (%%): %.4f (%.4f)" % (np.mean(au), np.std(au))
    # a recomputed value on a rounding edge may print one digit off: compare as numbers at the printed precision
    got = re.search(r"\[METRIC\] Training Accelerator Utilization \[AU\] \(%\): ([0-9.]+) \(([0-9.]+)\)", stdout)
    assert got, stdout
    assert abs(float(got.group(1)) - np.mean(au)) <= 0.00005 + 1e-9, (line, got.group(0))
    got = re.search(r"\[METRIC\] Training Throughput \(samples/second\): ([0-9.]+)", stdout)
    assert abs(float(got.group(1)) - np.mean(tp)) <= 0.00005 + 1e-6 * np.mean(tp), got.group(0)
    assert "[METRIC] Number of Simulated Accelerators: %d \n" % world in stdout
    assert summ["num_accelerators"] == world and summ["epochs"] == len(epochs)
    verdict = "success" if np.mean(au) >= au_pass else "fail"
    assert m["train_au_meet_expectation"] == verdict
    return au, tp


def test_metrics_equal_dlio_formulas_from_the_log(lade_cli, tmp_path):
    data = tmp_path / "data"
    datagen(lade_cli, data, "tfrecord", 6, 8, 4096, 1024)
    out = tmp_path / "out"
    r = run(lade_cli, "run", "dataset.format=tfrecord", "dataset.data_folder=%s" % data, "dataset.num_files_train=6",
            "dataset.num_samples_per_file=8", "dataset.record_length_bytes=4096", "reader.batch_size=4",
            "reader.read_threads=2", "reader.data_loader=tensorflow", "train.epochs=3",
            "train.computation_time=0.01", "output.folder=%s" % out, "lade.log_samples=1")
    au, tp = check_metrics(str(out), 1, 4, 4096, r.stdout)
    assert all(0 < a <= 100 for a in au)
    steps = list(csv.DictReader(open(out / "0_steps.csv")))
    assert len(steps) == 3 * (6 * 8 // 4)
    # the sleep of computation_time: never shorter, late by the scheduler's wake-up (a loaded machine)
    assert all(0.0099 <= float(s["compute_s"]) < 0.2 for s in steps), [s["compute_s"] for s in steps]
    for f in ("0_output.json", "0_per_epoch_stats.json", "dlio.log"):
        assert (out / f).exists(), f
    o = json.load(open(out / "0_output.json"))
    assert set(o["1"]) >= {"load", "proc", "compute", "au", "throughput"}
    assert "[METRIC] ==========================================================" in open(out / "dlio.log").read()


def test_slow_source_lowers_au_and_formulas_still_hold(lade_cli, tmp_path):
    """TFRecord files served by nginx through the fault proxy (25 ms per request): loading is slow on purpose."""
    import httpenv
    why = httpenv.missing()
    if why:
        pytest.skip(why)
    import tempfile
    served = tempfile.mkdtemp(prefix="lade-dlio-http-")
    os.chmod(served, 0o755)  # nginx's worker runs as another user when started by root
    data = os.path.join(served, "data")
    datagen(lade_cli, data, "tfrecord", 4, 8, 2048, 0)
    for d, _, fs in os.walk(served):
        os.chmod(d, 0o755)
        for f in fs:
            os.chmod(os.path.join(d, f), 0o644)
    with httpenv.NginxEnv(served, proxy=True) as env:
        env.proxy(latency_ms=25)
        out = tmp_path / "out"
        r = run(lade_cli, "run", "dataset.format=tfrecord", "dataset.data_folder=%s/data" % env.url,
                "dataset.num_files_train=4", "dataset.num_samples_per_file=8", "dataset.record_length_bytes=2048",
                "reader.batch_size=2", "reader.read_threads=1", "reader.prefetch_size=1",
                "reader.data_loader=pytorch", "train.epochs=2", "train.computation_time=0.005",
                "output.folder=%s" % out, "lade.http_concurrency=1", "lade.index_dir=%s" % (tmp_path / "idx"),
                # the pass mark the AU check below implies: a min(au) under 97 of 2 epochs is a mean under 98.5,
                # so the verdict follows from it (at 90 it depended on how loaded the machine was)
                "metric.au=0.99")
    shutil.rmtree(served, ignore_errors=True)
    au, _ = check_metrics(str(out), 1, 2, 2048, r.stdout, au_pass=99)
    # 5 ms of compute behind >= 25 ms requests: some step waited for its batch (read ahead and coalesced
    # later, so by how much varies with the machine's load)
    loads = [float(r["load_s"]) for r in csv.DictReader(open(out / "0_steps.csv"))]
    assert max(loads) > 0.02 and min(au) < 97, (au, max(loads))
    assert "fail" in r.stdout


# ---------------------------------------------------------------- ranks

def launcher_cmd(kind, n):
    if kind == "mpirun":
        if not shutil.which("mpirun"):
            pytest.skip("mpirun not found")
        cmd = ["mpirun", "--oversubscribe", "-np", str(n)]
        if os.geteuid() == 0:
            cmd.insert(1, "--allow-run-as-root")
        return cmd
    if "ucx" not in subprocess.run([os.environ.get("LADE_CLI", "lade"), "--version"], capture_output=True,
                                   text=True).stdout:
        pytest.skip("this build has no UCX")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % n, "--redirects",
            "2", "--tee", "2", "--no_python"]


def read_samples(out_dir, world):
    per = {}
    for r in range(world):
        for row in csv.DictReader(open(os.path.join(out_dir, "%d_samples.csv" % r))):
            per.setdefault(r, []).append((int(row["epoch"]), int(row["step"]),
                                          [int(x) for x in row["indices"].split()]))
    return per


@pytest.mark.parametrize("launcher,reader,fmt", [("mpirun", "pytorch", "npz"), ("mpirun", "tensorflow", "tfrecord"),
                                                 ("torchrun", "pytorch", "tfrecord")])
def test_ranks_same_steps_barrier_holds_each_sample_once(lade_cli, tmp_path, launcher, reader, fmt):
    N, files, spf, B, E = 4, (32 if fmt == "npz" else 8), (1 if fmt == "npz" else 4), 2, 2
    data = tmp_path / "data"
    datagen(lade_cli, data, fmt, files, spf, 1024, 256)
    out = tmp_path / "out"
    cmd = launcher_cmd(launcher, N) + [lade_cli, "dlio", "run", "dataset.format=" + fmt,
                                       "dataset.data_folder=%s" % data, "dataset.num_files_train=%d" % files,
                                       "dataset.num_samples_per_file=%d" % spf, "dataset.record_length_bytes=1024",
                                       "reader.batch_size=%d" % B, "reader.read_threads=2",
                                       "reader.data_loader=" + reader, "train.epochs=%d" % E,
                                       "train.computation_time=0.002", "output.folder=%s" % out,
                                       "lade.log_samples=1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    T = files * spf
    steps = T // (B * N)
    logs = [list(csv.DictReader(open(out / ("%d_steps.csv" % k)))) for k in range(N)]
    assert all(len(l) == E * steps for l in logs), [len(l) for l in logs]  # the same steps on every rank
    for i in range(E * steps):  # nobody left a barrier before the last one entered it
        enter = [float(l[i]["barrier_enter_mono_s"]) for l in logs]
        leave = [float(l[i]["barrier_enter_mono_s"]) + float(l[i]["barrier_s"]) for l in logs]
        assert max(enter) <= min(leave) + 1e-6, (i, enter, leave)
    per = read_samples(str(out), N)
    for e in range(1, E + 1):  # each sample once per epoch (T is a multiple of B x N here)
        seen = sorted(x for k in range(N) for (ep, st, idx) in per[k] if ep == e for x in idx)
        assert seen == list(range(T)), (e, seen)
    if reader == "pytorch":  # DLIO's torch sampler: a contiguous block per rank, in order, every epoch the same
        P = math.ceil(T / N)
        for k in range(N):
            got = [x for (ep, st, idx) in per[k] if ep == 1 for x in idx]
            assert got == list(range(k * P, k * P + steps * B)), (k, got)
    else:  # tf.data: files i % N == rank
        for k in range(N):
            files_read = {x // spf for (ep, st, idx) in per[k] for x in idx}
            assert files_read == {f for f in range(files) if f % N == k}, (k, files_read)
    check_metrics(str(out), N, B, 1024, r.stdout)


def test_sweep_reports_max_accelerators(lade_cli, tmp_path):
    if not shutil.which("mpirun"):
        pytest.skip("mpirun not found")
    data = tmp_path / "data"
    datagen(lade_cli, data, "npz", 16, 1, 2048, 0)
    r = run(lade_cli, "sweep", "dataset.format=npz", "dataset.data_folder=%s" % data, "dataset.num_files_train=16",
            "dataset.record_length_bytes=2048", "reader.batch_size=1", "reader.data_loader=pytorch",
            "train.epochs=1", "train.computation_time=0.02", "metric.au=0.5", "output.folder=%s" % (tmp_path / "sw"),
            "--max", "4", timeout=600)
    rows = re.findall(r"^\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) (pass|fail)$", r.stdout, re.M)
    assert [int(x[0]) for x in rows] == [1, 2, 4], r.stdout
    assert "max accelerators at AU >= 50%: 4" in r.stdout, r.stdout
    for n in (1, 2, 4):
        assert (tmp_path / "sw" / ("accelerators-%d" % n) / "summary.json").exists()
