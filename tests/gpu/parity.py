"""Device parity (tests/gpu/run.sh): every batch lade delivers on the GPU
equals the host batch of the same run, byte for byte, while the consumer
lags on the GPU and churns PyTorch's caching allocator between steps.

For each case a device=cuda loader and a host loader with the same settings
run side by side. For the device batch, the consumer's stream first sleeps
(torch.cuda._sleep: the GPU falls behind the host by several batches), then
an exact integer checksum of the data and labels is queued on that stream
(nothing waits for it), the torch tensors are dropped (the batch goes back
to lade while the GPU has not yet read it), and tensors are allocated and
freed. lade may reuse the device buffer only after the checksum ran (the
release's event on the consumer's stream): if it reused it earlier, the
checksum would read a later batch. The host checksums are computed on the
CPU after the loop (so the host runs ahead of the sleeping GPU); at the end
both lists must be equal. The first batch of every epoch is
also compared element by element.

A negative control shows the check can fail: the same lagging consumer, but
reading each batch on a second stream that lade was never told about (its
release fences only the stream given to __dlpack__). It is expected to see
wrong bytes; its count is printed, not asserted (it is timing-dependent).
"""
import os
import sys
import time

import numpy as np
import torch

import lade

SLEEP_CYCLES = int(os.environ.get("LADE_GPU_SLEEP", "40000000"))  # ~20 ms at 2 GHz per step


def make_data(root):
    from PIL import Image
    rng = np.random.default_rng(0)
    jpg = os.path.join(root, "jpeg")
    for c in range(4):
        os.makedirs(os.path.join(jpg, "c%d" % c), exist_ok=True)
    for i in range(256):
        h, w = int(rng.integers(200, 420)), int(rng.integers(200, 520))
        base = rng.integers(0, 255, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        img = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:h, :w]
        img = np.clip(img.astype(np.int16) + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(jpg, "c%d" % (i % 4), "%04d.jpg" % i), quality=90)
    npy = os.path.join(root, "npy")
    os.makedirs(npy, exist_ok=True)
    for i in range(300):
        np.save(os.path.join(npy, "%04d.npy" % i), rng.standard_normal((3, 64, 64)).astype(np.float32))
    return jpg, npy


def checksum(t):
    """Exact: the bytes as int32/uint8 words, summed with position weights in int64 (wraps alike on CPU and GPU)."""
    flat = t.reshape(-1)
    w = flat.view(torch.int32) if flat.dtype == torch.float32 else flat
    w = w.to(torch.int64)
    pos = torch.arange(w.numel(), device=w.device, dtype=torch.int64) % 65521 + 1
    return torch.stack([w.sum(), (w * pos).sum()])


def run_case(name, source, settings, epochs, prefetch, lie=False):
    common = dict(batch_size=32, epochs=epochs, seed=7, threads=8, output="torch", meta=True, **settings)
    host = lade.Loader(source, **common)
    dev = lade.Loader(source, device="cuda", device_prefetch=prefetch, **common)
    side = torch.cuda.Stream() if lie else None
    dev_sums, host_sums, exact = [], [], 0
    n = 0
    for (x, y, b), (hx, hy, hb) in zip(dev.stream(), host.stream()):
        assert x.is_cuda and y.is_cuda and x.device.index == 0, (x.device, y.device)
        assert (b.epoch, b.step) == (hb.epoch, hb.step)
        if b.step == 0:  # element by element, synchronously
            assert torch.equal(x.cpu(), hx) and torch.equal(y.cpu(), hy), "%s: epoch %d differs" % (name, b.epoch)
            exact += 1
        if lie:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(SLEEP_CYCLES)
                dev_sums.append(torch.cat([checksum(x), checksum(y)]))
        else:
            torch.cuda._sleep(SLEEP_CYCLES)
            dev_sums.append(torch.cat([checksum(x), checksum(y)]))
        host_sums.append((hx.clone(), hy.clone()))  # summed after the loop: the host must outrun the GPU
        del x, y, b, hx, hy, hb
        junk = [torch.empty(int(s), device="cuda") for s in np.random.default_rng(n).integers(1 << 16, 1 << 24, 4)]
        del junk
        n += 1
    torch.cuda.synchronize()
    st = dev.stats()
    dev.close()
    host.close()
    got = torch.stack(dev_sums).cpu()
    want = torch.stack([torch.cat([checksum(hx), checksum(hy)]) for hx, hy in host_sums])
    bad = int((got != want).any(dim=1).sum())
    print("%-34s prefetch %d: %3d batches, %d compared whole, %3d differ; h2d %.1f MB in %.3f s GPU, consumer "
          "waited %.4f s, %d device buffers" % (name, prefetch, n, exact, bad, st["h2d_bytes"] / 1e6,
                                                st["h2d_seconds"], st["h2d_wait_seconds"], st["device_buffers"]))
    return bad, n


def main():
    assert torch.cuda.is_available()
    torch.zeros(1, device="cuda")
    assert "cuda" in lade.features(), lade.features()
    libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libcudart.so" in ln})
    print("libcudart mapped (lade shares torch's: one expected):", libs)
    assert len(libs) == 1, libs
    root = "/tmp/lade-gpu-data"
    jpg, npy = make_data(root)
    cases = [
        ("jpeg imagenet-train float32", jpg, dict(transform="imagenet-train")),
        ("jpeg imagenet-train uint8", jpg, dict(transform="imagenet-train", image_dtype="uint8")),
        ("jpeg imagenet-eval float32", jpg, dict(transform="imagenet-eval")),
        ("jpeg imagenet-eval uint8", jpg, dict(transform="imagenet-eval", image_dtype="uint8")),
        ("npy float32", npy, dict(transform="auto")),
    ]
    failures = 0
    t0 = time.time()
    for name, src, st in cases:
        for pf in (1, 2, 4):
            bad, n = run_case(name, src, st, epochs=3, prefetch=pf)
            failures += bad > 0 or n == 0
    # a short last batch (drop_last=False: 300 % 32) and the loader's other paths: seek back, a held batch
    dev = lade.Loader(npy, device="cuda", batch_size=32, epochs=2, seed=7, output="torch", transform="auto")
    host = lade.Loader(npy, batch_size=32, epochs=2, seed=7, output="torch", transform="auto")
    held = [next(iter(dev))]  # kept across the whole epoch: the ring grows instead of stalling
    dev.set_epoch(1)
    host.set_epoch(1)
    for (x, y), (hx, hy) in zip(dev, host):
        failures += not (torch.equal(x.cpu(), hx) and torch.equal(y.cpu(), hy))
    want0 = next(iter(lade.Loader(npy, batch_size=32, epochs=2, seed=7, output="torch", transform="auto")))
    failures += not torch.equal(held[0][0].cpu(), want0[0])
    print("seek, a batch held over an epoch, the short last batch (%d samples): %s"
          % (hx.shape[0], "equal" if not failures else "DIFFER"))
    del held
    dev.close()
    host.close()
    # the negative control
    bad, n = run_case("control: unannounced stream", jpg, dict(transform="imagenet-eval"), epochs=2, prefetch=1,
                      lie=True)
    print("negative control: %d of %d batches read wrong bytes on a stream lade was not told of (expected > 0)"
          % (bad, n))
    print("parity: %s (%.1f s)" % ("PASS" if failures == 0 else "FAIL: %d" % failures, time.time() - t0))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
