"""The Python module against the C API: identical batches, zero copy, resume, errors, outputs."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import lade
from conftest import list_files

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _chain(arrays):
    s = 0
    for a in arrays:
        s = lade._lade.checksum(np.ascontiguousarray(a), s)
    return s


def test_checksum_equals_c_api_and_cli(npy_dir, lade_cli):
    out = subprocess.run([lade_cli, "bench", npy_dir, "--batch-size", "32", "--threads", "2", "--seed", "7",
                          "--epochs", "2", "--json"], check=True, capture_output=True, text=True).stdout
    cli = json.loads(out)
    with lade.Loader(npy_dir, batch_size=32, threads=2, seed=7, epochs=2, output="numpy") as L:
        datas = [d.copy() for d, _ in L.stream()]  # both epochs in one loop
    assert len(datas) == cli["batches"] == 20
    py_sum = _chain(datas)
    assert "%016x" % py_sum == cli["checksum"]
    c = lade._lade.c_run([("source", npy_dir), ("batch_size", "32"), ("threads", "1"), ("seed", "7"),
                          ("epochs", "2")])
    assert c["checksum"] == py_sum
    assert c["batches"] == 20


def test_values_match_files(npy_dir):
    files, labels = list_files(npy_dir)
    assert len(files) == 300
    with lade.Loader(npy_dir, batch_size=64, threads=2, seed=1, output="numpy", meta=True) as L:
        assert L.num_samples == 300 and L.steps_per_epoch == 5 and len(L) == 5
        seen = []
        for data, lab, b in L:
            idx = b.indices.tolist()
            n = 64 if b.step < 4 else 300 - 4 * 64  # the last batch is short, as DataLoader's
            assert data.shape == (n, 3, 8, 8) and data.dtype == np.float32 and b.valid == n
            assert lab.dtype == np.int64 and lab.tolist() == [labels[i] for i in idx]
            for j in (0, 17, n - 1):
                assert np.array_equal(data[j], np.load(files[idx[j]]))
            seen += idx
    # one epoch of a shuffled plan: every sample exactly once
    assert sorted(seen) == list(range(300))


@needs_torch
def test_torch_zero_copy(npy_dir):
    with lade.Loader(npy_dir, batch_size=16, threads=1, output="torch", meta=True) as L:
        data, labels, b = next(iter(L))
        assert isinstance(data, torch.Tensor) and data.dtype == torch.float32
        assert tuple(data.shape) == (16, 3, 8, 8) and data.is_contiguous()
        assert data.data_ptr() == b.data_ptr  # the tensor's memory is the batch buffer
        assert labels.dtype == torch.int64 and labels.tolist() == b.labels.tolist()
        # a second view shares the buffer; writes are visible through both
        again = torch.utils.dlpack.from_dlpack(b.__dlpack__())
        assert again.data_ptr() == data.data_ptr()
        data[0, 0, 0, 0] = 12345.0
        assert float(again[0, 0, 0, 0]) == 12345.0
        assert b._refs == 3  # the Batch + two DLPack views
        third = torch.from_dlpack(b)  # the protocol form (__dlpack_device__ + __dlpack__)
        assert third.data_ptr() == b.data_ptr and b._refs == 4
        del again, third
        assert b._refs == 2


def test_numpy_zero_copy_and_dlpack(npy_dir):
    with lade.Loader(npy_dir, batch_size=16, threads=1, output="numpy", meta=True) as L:
        data, labels, b = next(iter(L))
        assert data.ctypes.data == b.data_ptr and data.flags.writeable
        assert np.from_dlpack(b).ctypes.data == b.data_ptr
        assert labels.tolist() == b.labels.tolist()
    with lade.Loader(npy_dir, batch_size=16, threads=1, output="dlpack") as L:
        batch, labels = next(iter(L))
        assert isinstance(batch, lade.Batch) and isinstance(labels, lade.Array)
        assert batch.__dlpack_device__() == (1, 0)
        assert batch.shape == (16, 3, 8, 8) and batch.dtype == "float32" and batch.epoch == 0 and batch.step == 0
        assert np.asarray(labels).dtype == np.int64 and len(labels) == 16


@needs_torch
def test_default_output_is_torch(npy_dir):
    with lade.Loader(npy_dir, batch_size=8) as L:
        d, l = next(iter(L))
        assert isinstance(d, torch.Tensor) and isinstance(l, torch.Tensor)


def _first_n(loader, n):
    out = []
    for data, labels, b in loader.stream():
        out.append((np.array(data, copy=True), np.array(labels, copy=True), b.epoch, b.step, b.indices.tolist()))
        if len(out) == n:
            break
    return out


def test_resume_mid_epoch_bit_exact(npy_dir):
    kw = dict(batch_size=32, threads=2, seed=11, epochs=3, output="numpy", meta=True)
    with lade.Loader(npy_dir, **kw) as L:
        full = _first_n(L, 30)
    with lade.Loader(npy_dir, **kw) as L:
        _first_n(L, 13)  # into the second epoch (10 steps per epoch)
        state = L.state_dict()
    assert (state["epoch"], state["step"]) == (1, 3)
    with lade.Loader(npy_dir, **kw) as L2:
        L2.load_state_dict(state)
        assert L2.tell() == (1, 3)
        rest = _first_n(L2, 17)
    assert len(rest) == 17
    for a, b in zip(full[13:], rest):
        assert a[2:] == b[2:]
        assert np.array_equal(a[0].view(np.uint32), b[0].view(np.uint32)) and np.array_equal(a[1], b[1])


def test_state_dict_mismatch_rejected(npy_dir):
    # world_size, rank and batch_size may change (tests/python/test_resize.py); the seed may not
    with lade.Loader(npy_dir, batch_size=32, seed=1) as L:
        st = L.state_dict()
    with lade.Loader(npy_dir, batch_size=32, seed=2) as L:
        with pytest.raises(lade.Error, match="setting 'seed' differs"):
            L.load_state_dict(st)


@pytest.mark.parametrize("epochs", [3, None])
def test_epochs_out_of_range_refused(npy_dir, epochs):
    """An epoch or step that is negative, past the loader's epochs or past 2**64 raises lade.Error naming the
    value and the range, and moves nothing: it never wraps (2**64 is not epoch 0, -1 not 2**64 - 1)."""
    top = 3 if epochs else 1000000000
    with lade.Loader(npy_dir, batch_size=32, seed=1, epochs=epochs, output="numpy") as L:
        L.seek(1, 4)
        for bad in (2 ** 64, 2 ** 64 + 1, -1, 2 ** 63, top + 1):
            said = r"epoch %d(, step 0\))? is out of range: epochs are 0 to %d" % (bad, top - 1)
            with pytest.raises(lade.Error, match=r"^seek.*" + said) as e:
                L.seek(bad)
            assert e.value.name == "LADE_ERANGE"
            with pytest.raises(lade.Error, match=r"^set_epoch: .*" + said):
                L.set_epoch(bad)
            with pytest.raises(lade.Error, match=r"^load_state_dict: .*" + said):
                L.load_state_dict({"version": 1, "epoch": bad, "step": 0})
            assert L.tell() == (1, 4)
        for bad in (2 ** 64, -1, 10):
            with pytest.raises(lade.Error, match=r"step %d\)? is out of range: .*steps (are )?0 to 9" % bad):
                L.load_state_dict({"epoch": 0, "step": bad})
            with pytest.raises(lade.Error, match=r"step %d\)? is out of range" % bad):
                L.seek(0, bad)
        assert L.tell() == (1, 4)
        with pytest.raises(lade.Error, match="epoch_stats: epoch -1 is out of range"):
            L.epoch_stats(-1)
        with pytest.raises(lade.Error, match="epoch_stats: epoch 18446744073709551616 is out of range"):
            L.epoch_stats(2 ** 64)
        with pytest.raises(TypeError):
            L.seek(1.5)
        # the end itself is a position; the largest epoch is one
        L.load_state_dict({"epoch": top, "step": 0})
        assert L.tell() == (top, 0) and L.next_batch() is None
        L.set_epoch(top - 1)
        assert L.tell() == (top - 1, 0)
        b = L.next_batch()
        assert (b.epoch, b.step) == (top - 1, 0)


@pytest.mark.parametrize("state", [{}, None, 5, "epoch", [("epoch", 1), ("step", 0)], {"epoch": 1},
                                   {"step": 0}, {"epoch": "1", "step": 0}, {"epoch": 1.0, "step": 0},
                                   {"epoch": True, "step": 0}, {"epoch": 1, "step": None},
                                   {"epoch": 1, "step": 0, "settings": 5}, {"epoch": 1, "step": 0, "version": "x"}],
                         ids=repr)
def test_load_state_dict_malformed(npy_dir, state):
    """Anything that is not a state dict raises lade.Error saying what a state dict holds, and moves nothing."""
    with lade.Loader(npy_dir, batch_size=32, seed=1, epochs=3) as L:
        L.seek(2, 1)
        with pytest.raises(lade.Error, match="load_state_dict") as e:
            L.load_state_dict(state)
        assert "a lade state dict is what Loader.state_dict() returns" in str(e.value)
        assert L.tell() == (2, 1)
        L.load_state_dict({"epoch": 1, "step": 2})  # numpy integers as a checkpoint may hold them too
        assert L.tell() == (1, 2)
        L.load_state_dict({"epoch": np.int64(0), "step": np.uint32(3)})
        assert L.tell() == (0, 3)


def test_error_text(npy_dir, tmp_path):
    with pytest.raises(lade.Error) as e:
        lade.Loader(npy_dir, bogus_key=1)
    assert isinstance(e.value, RuntimeError)
    assert "unknown setting 'bogus_key'" in str(e.value) and "batch_size" in str(e.value)
    assert e.value.name == "LADE_EINVAL" and e.value.code == lade._lade.LADE_EINVAL
    with pytest.raises(lade.Error, match="prefetch"):
        lade.Loader(npy_dir, prefetch=0)
    missing = str(tmp_path / "does-not-exist")
    with pytest.raises(lade.Error) as e:  # at create or at the first batch, by the engine's choice
        with lade.Loader(missing, batch_size=4) as L:
            for _ in L:
                pass
    assert "does-not-exist" in str(e.value) and "No such file" in str(e.value)
    L = lade.Loader(npy_dir, batch_size=4)
    L.close()
    with pytest.raises(lade.Error, match="closed"):
        L.next_batch()
    with pytest.raises(ValueError):
        lade.Loader(npy_dir, output="pandas")


def test_names_not_utf8(tmp_path):
    """A tar member (or file) named with bytes that are not UTF-8: samples/classes give the name as
    os.fsdecode does (os.fsencode gets the bytes back), and an error naming it is a lade.Error showing
    the bytes as \\xNN, never a UnicodeDecodeError."""
    import io
    import tarfile

    def add(t, name, data):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))

    buf = io.BytesIO()
    np.save(buf, np.arange(4, dtype=np.float32))
    good = buf.getvalue()
    shard = str(tmp_path / "bad.tar")
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as t:
        add(t, os.fsdecode(b"cls/a\xff.npy"), good)
        add(t, os.fsdecode(b"cls/b\xfe\xe2\x82.npy"), good[:20])  # a cut UTF-8 sequence too; truncated .npy
        add(t, "cls/c.npy", good)
    with lade.Loader(shard, batch_size=1, transform="npy", output="numpy", shuffle=False) as L:
        assert [os.fsencode(p) for p, _ in L.samples] == [os.fsencode(shard) + n for n in
                                                          (b"/cls/a\xff", b"/cls/b\xfe\xe2\x82", b"/cls/c")]
        with pytest.raises(lade.Error) as e:
            list(L)
    msg = str(e.value)
    assert "bad.tar" in msg and "b\\xfe\\xe2\\x82" in msg, msg
    # a folder of files so named: the same, through the dir source's error
    if "jpeg" not in lade.features():
        return
    d = tmp_path / "dir"
    (d / "c").mkdir(parents=True)
    with open(os.path.join(os.fsencode(str(d / "c")), b"x\xff.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    with lade.Loader(str(d), batch_size=1, output="numpy") as L:
        assert os.fsencode(L.samples[0][0]).endswith(b"/c/x\xff.jpg")
        with pytest.raises(lade.Error, match=r"x\\xff\.jpg"):
            list(L)


def test_rank_detection(monkeypatch, npy_dir):
    for k in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert lade.detect_rank() == (0, 1)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert lade.detect_rank() == (1, 4)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert lade.detect_rank() == (2, 3)
    L = lade.Loader(npy_dir, batch_size=10, output="numpy", meta=True)
    assert L.settings["rank"] == "2" and L.settings["world_size"] == "3"
    # rank 2 of 3 gets its own slice: disjoint from rank 0's
    L0 = lade.Loader(npy_dir, batch_size=10, output="numpy", meta=True, rank=0)
    i2 = set(next(iter(L))[2].indices.tolist())
    i0 = set(next(iter(L0))[2].indices.tolist())
    assert len(i2) == 10 and not (i0 & i2)
    L.close()
    L0.close()


def test_settings_passthrough(npy_dir):
    with lade.Loader(npy_dir, batch_size=50, shuffle=False, output="numpy", meta=True) as L:
        _, _, b = next(iter(L))
        assert b.indices.tolist() == list(range(50))
    keys = lade.config_keys()
    assert "prefetch" in keys and keys["batch_size"][0] == "32"


def test_http_settings_and_s3_aliases(npy_dir):
    """The generic HTTP settings are http_*; the s3_* spellings are aliases of them."""
    keys = lade.config_keys()
    for name in ("concurrency", "max_concurrency", "timeout_ms", "connect_timeout_ms", "retries", "retry_base_ms"):
        assert "http_" + name in keys and "s3_" + name not in keys
        assert "alias s3_" + name in keys["http_" + name][1]
    with lade.Loader(npy_dir, batch_size=8, output="numpy", http_retries=3, s3_timeout_ms=5000, s3_concurrency=4,
                     http_max_concurrency=8) as L:
        assert len(next(iter(L))[0]) == 8
    with pytest.raises(lade.Error) as e:
        lade.Loader(npy_dir, s3_retries=101)
    assert "http_retries" in str(e.value) and "0..100" in str(e.value)


@needs_torch
def test_train_cnn_example(lade_cli, tmp_path):
    d = tmp_path / "train"
    subprocess.run([lade_cli, "gen", "npy", str(d), "--count", "256", "--shape", "3,16,16"], check=True,
                   stdout=subprocess.DEVNULL)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "examples", "train_cnn.py")
    r = subprocess.run([sys.executable, script, "--data", str(d), "--steps", "20", "--batch-size", "32"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert sum(1 for l in lines if l.startswith("step ")) == 20
    assert lines[-1].startswith("final loss") and "after 20 steps" in lines[-1]
    assert "resume at epoch 2 step 4" in lines[-1]  # 8 steps per epoch: 20 = 2 * 8 + 4


def test_jpeg_imagenet_train_matches_cli(jpeg_dir, lade_cli):
    r = subprocess.run([lade_cli, "bench", jpeg_dir, "--transform", "imagenet-train", "--batch-size", "8",
                        "--threads", "2", "--seed", "4", "--set", "crop_size=32", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("imagenet-train unavailable: " + r.stderr.strip())
    cli = json.loads(r.stdout)
    with lade.Loader(jpeg_dir, transform="imagenet-train", batch_size=8, threads=2, seed=4, crop_size=32,
                     output="numpy", meta=True) as L:
        got = [(d.copy(), l.copy(), b.indices.tolist()) for d, l, b in L]
    assert len(got) == cli["batches"] == 3
    assert got[0][0].shape == (8, 3, 32, 32) and got[0][0].dtype == np.float32
    assert "%016x" % _chain(d for d, _, _ in got) == cli["checksum"]
    files, labels = list_files(jpeg_dir)
    for _, lab, idx in got:
        assert lab.tolist() == [labels[i] for i in idx]


def test_image_kernels_chosen_by_timing(jpeg_dir, npy_dir):
    """stats()["image_kernels"]: the decoder's horizontal pass and rows per
    libjpeg call, chosen by timing its first images (8 per candidate, at
    most 4 candidates): empty before, named after; empty for .npy."""
    try:
        L = lade.Loader(jpeg_dir, transform="imagenet-train", batch_size=8, threads=1, crop_size=32, epochs=6)
    except lade.Error as e:
        pytest.skip("imagenet-train unavailable: %s" % e)
    with L:
        assert L.stats()["image_kernels"] == ""
        n = sum(1 for _ in L.stream())
        st = L.stats()
    assert n == 18 and st["samples"] == 144
    m = re.fullmatch(r"(vbmi|vnni|avx2|neon|c)-rgbx?, (1|16) rows per libjpeg call \(trials cost ([0-9.]+) ms\)",
                     st["image_kernels"])
    assert m and float(m.group(3)) < 50, st
    with lade.Loader(npy_dir, batch_size=30) as L:
        next(iter(L))
        assert L.stats()["image_kernels"] == ""


_DEVICE_SCRIPT = r'''
import os, sys, lade
src, mode = sys.argv[1], sys.argv[2]
if mode == "cpu":  # a CPU epoch loads no CUDA library
    with lade.Loader(src, batch_size=30) as L:
        n = sum(1 for _ in L)
    maps = open("/proc/self/maps").read()
    print("EPOCH", n, "CUDA" if "libcudart" in maps or "libcuda." in maps else "NOCUDA")
else:
    try:
        lade.Loader(src, batch_size=30, **{mode: "cuda" if mode == "device" else True})
        print("OPENED")
    except lade.Error as e:
        print("ERROR", e)
'''


def _device_run(npy_dir, mode, lib=None):
    env = dict(os.environ)
    env.pop("LADE_CUDA_LIB", None)
    if lib:
        env["LADE_CUDA_LIB"] = lib
    r = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT, npy_dir, mode], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_device_cuda_errors_and_cpu_untouched(npy_dir):
    """device=cuda and pin_memory open the CUDA runtime at create (issue 31): without a usable one the error
    names the setting, the library and what to install; a library that is not libcudart is named as such; a
    bad device value names the forms; a CPU epoch maps no CUDA library."""
    assert _device_run(npy_dir, "cpu") == "EPOCH 10 NOCUDA"
    with pytest.raises(lade.Error, match=r"'device' is cpu, cuda or cuda:N .*not 'gpu'"):
        lade.Loader(npy_dir, device="gpu")
    missing = "/nonexistent/lade-test/libcudart.so.99"
    out = _device_run(npy_dir, "device", lib=missing)
    assert out.startswith("ERROR device=cuda: cannot load the CUDA runtime") and missing in out, out
    assert "LADE_CUDA_LIB" in out and "install" in out, out
    out = _device_run(npy_dir, "pin_memory", lib=missing)
    assert out.startswith("ERROR pin_memory=true: cannot load the CUDA runtime") and missing in out, out
    out = _device_run(npy_dir, "device", lib="libz.so.1")
    assert "libz.so.1 is not the CUDA runtime: it has no cudaGetDeviceCount" in out, out
    if "cuda" in lade.features():
        return  # a usable device here: the errors below are not this machine's
    out = _device_run(npy_dir, "device")
    assert out.startswith("ERROR device=cuda: ") and "CUDA runtime" in out, out
    out = _device_run(npy_dir, "pin_memory")
    assert out.startswith("ERROR pin_memory=true: ") and "CUDA runtime" in out, out


_FAKE_SCRIPT = r'''
import ctypes, os, sys, numpy as np, lade
src = sys.argv[1]
fake = ctypes.CDLL(os.environ["LADE_CUDA_LIB"])  # the library lade opens: one instance
stream = ctypes.c_void_p()
assert fake.cudaStreamCreateWithFlags(ctypes.byref(stream), 1) == 0
L = lade.Loader(src, batch_size=30, epochs=2, device="cuda", output="dlpack", meta=True, device_prefetch=1)
H = lade.Loader(src, batch_size=30, epochs=2, output="numpy")
for (b, labels, _), (hx, hy) in zip(L.stream(), H.stream()):
    assert b.device == "cuda:0" and b.__dlpack_device__() == (2, 0), b.device
    try:
        memoryview(b)
        print("BUFFER OPENED")
    except BufferError as e:
        assert "GPU memory" in str(e), e
    cap = b.__dlpack__(stream=stream.value)  # a consumer's stream: lade_batch_use_stream
    lab = b._device_labels()
    assert type(cap).__name__ == type(lab).__name__ == "PyCapsule"
    assert list(labels) == list(hy)  # the host copy of the labels
    del cap, lab, b
st = L.stats()
print("H2D", st["h2d_bytes"], st["device_buffers"], st["h2d_seconds"] > 0)
try:
    lade.Loader(src, batch_size=30, device="cuda", output="numpy")
except lade.Error as e:
    print("NUMPY", e)
'''


def test_device_batches_with_a_stand_in_runtime(npy_dir):
    """device=cuda end to end through the Python module, on fake_cudart.c (the CPU stand-in for libcudart that
    test_devring uses): batches say cuda:0, refuse the buffer protocol, export DLPack with the stream protocol and
    their labels on the device, and count the bytes copied; output='numpy' is refused by name. The data's bytes are
    checked against the host run in test_devring (C) and on a real GPU by tests/gpu/run.sh."""
    fake = os.path.join(os.path.dirname(os.environ["LADE_CLI"]), "tests", "libcudart.so.99")
    if not os.path.exists(fake):
        pytest.skip("no fake_cudart in this build")
    env = dict(os.environ, LADE_CUDA_LIB=fake)
    r = subprocess.run([sys.executable, "-c", _FAKE_SCRIPT, npy_dir], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    h2d = [l for l in lines if l.startswith("H2D")][0].split()
    assert int(h2d[1]) == 2 * 300 * (3 * 8 * 8 * 4 + 8), r.stdout  # 2 epochs of data and labels
    assert 1 <= int(h2d[2]) <= 3 and h2d[3] == "True", r.stdout
    assert "BUFFER OPENED" not in r.stdout
    assert any(l.startswith("NUMPY output='numpy' with device=cuda") for l in lines), r.stdout
    # the CLI: its checksum would read device memory, so it asks for --no-checksum; without it, the copies' figures
    cli = [os.environ["LADE_CLI"], "bench", npy_dir, "--set", "device=cuda", "--epochs", "2", "--batch-size", "30"]
    r = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "GPU memory" in r.stderr and "--no-checksum" in r.stderr, r.stderr
    r = subprocess.run(cli + ["--no-checksum", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["h2d_bytes"] == 2 * 300 * (3 * 8 * 8 * 4 + 8) and d["device_buffers"] >= 1, d


@needs_torch
def test_jpeg_uint8_hwc(jpeg_dir):
    try:
        L = lade.Loader(jpeg_dir, transform="imagenet-eval", batch_size=4, crop_size=16, resize_size=20,
                        image_dtype="uint8", output="torch", meta=True)
        d, l, b = next(iter(L))
    except lade.Error as e:
        pytest.skip("imagenet-eval unavailable: %s" % e)
    assert d.dtype == torch.uint8 and tuple(d.shape) == (4, 16, 16, 3) and d.data_ptr() == b.data_ptr
    L.close()


@needs_torch
def test_rank_from_torch_distributed(tmp_path, monkeypatch):
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "store"), rank=0, world_size=1)
    try:
        assert lade.detect_rank() == (0, 1)  # an initialised process group wins over the environment
    finally:
        dist.destroy_process_group()
    assert lade.detect_rank() == (3, 4)


def test_cache_stats_and_epoch_stats(npy_dir):
    # a memory tier big enough for the dataset: epoch 0 from storage, epoch 1 from memory; two workers read
    # the epochs' boundary steps at once, and a sample in both is read from storage once (the memory tier's
    # claim, issue 30), by either step: so the storage reads are exact, their split between the epochs is not
    with lade.Loader(npy_dir, batch_size=50, threads=2, epochs=2, output="numpy", cache_mem_bytes=10_000_000) as L:
        for _ in range(2):
            for _ in L:
                pass
        st = L.stats()
        e0, e1 = L.epoch_stats(0), L.epoch_stats(1)
        with pytest.raises(lade.Error):
            L.epoch_stats(2)
    # sample 0 is read once at open (the .npy header) through the tiers: its batch then hits memory
    assert st["samples_by_source"][0] == 299 and st["samples_by_source"][1] == 301
    assert st["cache_misses"] == 300 and st["get_requests"] == 0 and st["fetch_size"] == 0
    late = e1["samples_by_source"][0]  # boundary samples the next epoch's first step read first (at most 50)
    assert e0["samples_by_source"][:2] == (299 - late, 1 + late) and e0["batches"] == 6 and late <= 50
    assert abs(e0["miss_rate"] - (299 - late) / 300) < 1e-12
    assert e1["samples_by_source"][:2] == (late, 300 - late) and abs(e1["miss_rate"] - late / 300) < 1e-12
    assert sum(e1["bytes_by_source"][:2]) == sum(e0["bytes_by_source"][:2]) > 0
    assert e0["wait_seconds"] >= 0 and e1["get_requests"] == 0


_LOCAL_VARS = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
               "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
               "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE")


def _topology(L):
    st = L.stats()
    return st["node"], st["nodes"], st["local_rank"], st["ranks_per_node"]


def test_topology_in_stats(monkeypatch, npy_dir):
    """stats() says this rank's node (docs/transport.md, Nodes)."""
    for k in _LOCAL_VARS:
        monkeypatch.delenv(k, raising=False)
    with lade.Loader(npy_dir, batch_size=10, output="numpy") as L:
        assert _topology(L) == (0, 1, 0, 1)  # one process: node 0 of 1, alone on it
    # the setting: nodes of 2 consecutive ranks, so rank 3 of 4 is the second rank of node 1
    with lade.Loader(npy_dir, batch_size=10, output="numpy", rank=3, world_size=4, ranks_per_node=2) as L:
        assert _topology(L) == (1, 2, 1, 2)
    # a launcher's local rank and size (torchrun's names)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with lade.Loader(npy_dir, batch_size=10, output="numpy", rank=1, world_size=4) as L:
        assert _topology(L) == (0, 2, 1, 2)
    with pytest.raises(lade.Error, match=r"'ranks_per_node' \(3\) must divide the world size \(4\)"):
        lade.Loader(npy_dir, batch_size=10, output="numpy", rank=1, world_size=4, ranks_per_node=3)


def test_secrets_masked_in_settings_and_repr(npy_dir):
    """Loader.settings and repr never show S3 credentials."""
    with lade.Loader(npy_dir, batch_size=8, output="numpy", s3_secret_access_key="TOPSECRET",
                     s3_session_token="TOKEN42") as L:
        assert L.settings["s3_secret_access_key"] == "***" and L.settings["s3_session_token"] == "***"
        assert "TOPSECRET" not in repr(L) and "TOPSECRET" not in str(L.settings)
        assert L.settings["batch_size"] == "8"
    assert lade._lade.is_secret("s3_secret_access_key") and not lade._lade.is_secret("seed")
    with pytest.raises(lade.Error) as e:
        lade.Loader(npy_dir, label_file="/tmp/labels.txt")  # only s3 sources read it: refused, not ignored
    assert "label_file" in str(e.value)


def test_npy_folder_has_classes_and_samples(npy_dir):
    files, labels = list_files(npy_dir)
    with lade.Loader(npy_dir, batch_size=8, output="numpy") as L:
        assert L.classes == sorted(os.listdir(npy_dir))
        assert L.samples == list(zip(files, labels)) and L.targets == labels


_UCX_PROBE = r"""
import sys
import lade

def mapped():
    return sum("/libuc" in line for line in open("/proc/self/maps"))

with lade.Loader(sys.argv[1], batch_size=32, epochs=1, output="numpy") as L:
    n = sum(len(y) for _x, y in L)
print("samples", n, "ucx_libraries_before", mapped())
try:
    lade._lade.ucx_address()
    print("address ok")
except lade.Error as e:
    print("error", e)
print("ucx_libraries_after", mapped())
"""


@pytest.mark.skipif("ucx" not in lade.features(), reason="built without UCX")
def test_ucx_opened_on_first_use(npy_dir):
    """UCX is opened when the transport first needs it, not when lade is
    loaded: a process that imports lade and runs a loader has none of UCX's
    libraries (their constructors install signal handlers and memory hooks);
    asking for the UCX address opens them; a UCX that cannot be opened is an
    error naming the library and saying what to install."""
    run = lambda env: subprocess.run([sys.executable, "-c", _UCX_PROBE, npy_dir], capture_output=True, text=True,
                                     env=env, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "LADE_UCX_LIB"}
    p = run(env)
    assert p.returncode == 0, p.stderr
    assert "samples 300 ucx_libraries_before 0" in p.stdout, p.stdout
    assert "address ok" in p.stdout and "ucx_libraries_after 0" not in p.stdout, p.stdout
    p = run(dict(env, LADE_UCX_LIB="/nonexistent/libucp.so.0"))
    assert p.returncode == 0, p.stderr
    assert "error transport ucx: cannot load UCX (/nonexistent/libucp.so.0" in p.stdout, p.stdout
    assert "apt-get install libucx0" in p.stdout and "ucx_libraries_after 0" in p.stdout, p.stdout


def test_cache_stale_counted_and_refetched(tmp_path):
    """A file rewritten in place after the disk tier stored it (same name and
    size, other bytes): the next run serves the new bytes, read from storage,
    and stats() counts the old entry in cache_stale (docs/cache.md,
    Versions); the rest come from the tier."""
    root = tmp_path / "data" / "c0"
    root.mkdir(parents=True)
    for i in range(12):
        (root / ("f%02d.bin" % i)).write_bytes(bytes([i]) * 64)
    cache = str(tmp_path / "cache")

    def run():
        with lade.Loader(str(tmp_path / "data"), transform="raw", raw_size=64, batch_size=4, shuffle=False,
                         output="numpy", cache_dir=cache, cache_disk_bytes=1 << 20) as L:
            got = [bytes(np.asarray(x)[k].tobytes()) for x, _y in L for k in range(len(np.asarray(x)))]
            return got, L.stats()

    got, st = run()
    assert st["cache_stale"] == 0 and st["cache_misses"] == 12
    with open(root / "f05.bin", "r+b") as f:  # in place: the same inode and size, a new mtime
        f.write(b"\xee" * 64)
    got, st = run()
    assert got[5] == b"\xee" * 64 and got[4] == bytes([4]) * 64
    assert st["cache_stale"] == 1 and st["cache_misses"] == 1, st
