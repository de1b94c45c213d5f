"""Compares lade's JPEG pipeline with torchvision on PIL images.

lade is reached through the jpeg_crop test helper (tests/tools/jpeg_crop.c)
until the Python module exists. For each synthetic JPEG and crop box:
  reference = torchvision.transforms.functional.resized_crop(pil, top, left,
              h, w, [224, 224], antialias=True) (+ hflip)
and lade's uint8 HWC output must be within a mean absolute error of 2/255 per
channel; its float32 CHW output must equal the normalised uint8 output. Also
checks imagenet-eval against Resize(256) + CenterCrop(224) and the
RandomResizedCrop parameter statistics against torchvision's (loosely: the
RNGs differ). Exits 77 (skipped) when torch/torchvision/PIL are missing.
"""
import argparse
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
    from PIL import Image
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(77)

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
SIZE = 224


def photo(w, h, seed):
    """Smooth gradients, soft blobs, texture and noise: decodes like a photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        img[..., c] = rng.uniform(40, 200) + rng.uniform(-60, 60) * x / w + rng.uniform(-60, 60) * y / h
    for _ in range(5):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.05, 0.4) * max(w, h)
        blob = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img += blob[..., None] * rng.uniform(-80, 80, 3)
    img += 12 * np.sin(x * rng.uniform(0.05, 0.3))[..., None] * np.cos(y * rng.uniform(0.05, 0.3))[..., None]
    img += rng.normal(0, 10, (h, w, 1)) + rng.normal(0, 4, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def make_images(tmp):
    specs = [  # name, w, h, mode
        ("land_500x375", 500, 375, "RGB"),
        ("port_375x500", 375, 500, "RGB"),
        ("small_64x48", 64, 48, "RGB"),
        ("odd_333x217", 333, 217, "RGB"),
        ("big_2000x1800", 2000, 1800, "RGB"),
        ("gray_300x201", 300, 201, "L"),
        ("cmyk_320x240", 320, 240, "CMYK"),
        ("prog_401x299", 401, 299, "RGB", {"progressive": True}),
        ("s444_250x180", 250, 180, "RGB", {"subsampling": 0}),
        ("s422_500x375", 500, 375, "RGB", {"subsampling": 1}),
    ]
    out = []
    for i, (name, w, h, mode, *extra) in enumerate(specs):
        arr = photo(w, h, i)
        im = Image.fromarray(arr, "RGB")
        if mode == "L":
            im = im.convert("L")
        elif mode == "CMYK":
            im = im.convert("CMYK")
        path = os.path.join(tmp, name + ".jpg")
        im.save(path, quality=90, **(extra[0] if extra else {}))
        out.append((name, path))
    return out


def boxes_for(w, h, rng):
    bx = [
        (0, 0, h, w),  # full image
        (h // 3, w // 3, 2, 3),  # tiny
        (h - 1, w - 1, 1, 1),  # 1x1 at the corner
        (h - h // 2, w - w // 2, h // 2, w // 2),  # bottom-right edge
        (0, 0, h // 2, max(1, w // 5)),  # top-left, thin
        (h // 4, 0, h // 2, w),  # full-width band
    ]
    for _ in range(3):
        bh, bw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        bx.append((int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1)), bh, bw))
    if min(w, h) >= 2 * SIZE:  # DCT scaling 1/2, 1/4, 1/8
        for side in (2 * SIZE + 5, 4 * SIZE + 7, 8 * SIZE + 3, min(w, h)):
            if side <= min(w, h):
                bx.append(((h - side) // 3, (w - side) // 2, side, side))
                bx.append((0, w - side, side, min(w, side + 50) if w - side + side + 50 <= w else side))
    return bx


def lade_crop(helper, path, box, flip, dtype, tmp):
    out = os.path.join(tmp, "out.raw")
    top, left, h, w = box
    cmd = [helper, "crop", path, str(top), str(left), str(h), str(w), str(SIZE), str(int(flip)), dtype, out]
    subprocess.run(cmd, check=True)
    if dtype == "u8":
        return np.fromfile(out, np.uint8).reshape(SIZE, SIZE, 3)
    return np.fromfile(out, np.float32).reshape(3, SIZE, SIZE)


def reference(pil, box, flip):
    top, left, h, w = box
    r = F.resized_crop(pil, top, left, h, w, [SIZE, SIZE], interpolation=T.InterpolationMode.BILINEAR, antialias=True)
    if flip:
        r = F.hflip(r)
    return np.asarray(r.convert("RGB"), dtype=np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helper", required=True)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    rng = np.random.default_rng(1234)
    failures, worst = [], 0.0
    for name, path in make_images(a.tmp):
        pil = Image.open(path)
        pil.load()
        if pil.mode == "CMYK":
            pil = pil.convert("RGB")
        w, h = pil.size
        for k, box in enumerate(boxes_for(w, h, rng)):
            flip = k % 2 == 1
            got = lade_crop(a.helper, path, box, flip, "u8", a.tmp)
            ref = reference(pil, box, flip)
            diff = np.abs(got.astype(np.int32) - ref.astype(np.int32))
            mae = diff.reshape(-1, 3).mean(axis=0)
            worst = max(worst, float(mae.max()))
            status = "ok" if mae.max() <= 2.0 else "FAIL"
            print("%-15s box=%-26s flip=%d mae=%s max=%d %s" % (name, box, flip, np.round(mae, 3), diff.max(), status))
            if status != "ok":
                failures.append((name, box))
            f32 = lade_crop(a.helper, path, box, flip, "f32", a.tmp)
            expect = ((got.astype(np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)
            if not np.allclose(f32, expect, atol=1e-5):
                print("  float32 path differs from normalised uint8: max %g" % np.abs(f32 - expect).max())
                failures.append((name, box, "f32"))

        # imagenet-eval: Resize(256) + CenterCrop(224)
        out = os.path.join(a.tmp, "eval.raw")
        subprocess.run([a.helper, "eval", path, "256", str(SIZE), "u8", out], check=True)
        got = np.fromfile(out, np.uint8).reshape(SIZE, SIZE, 3)
        ev = T.Compose([T.Resize(256, antialias=True), T.CenterCrop(SIZE)])(pil)
        ref = np.asarray(ev.convert("RGB"), dtype=np.uint8)
        if ref.shape == got.shape:
            mae = np.abs(got.astype(np.int32) - ref.astype(np.int32)).reshape(-1, 3).mean(axis=0)
            status = "ok" if mae.max() <= 2.0 else "FAIL"
            print("%-15s eval 256/224 mae=%s %s" % (name, np.round(mae, 3), status))
            if status != "ok":
                failures.append((name, "eval"))
        else:
            print("%-15s eval skipped (image smaller than the crop: torchvision pads)" % name)

    # RandomResizedCrop statistics (the RNGs differ: compare distributions).
    W, H, N = 500, 375, 2000
    res = subprocess.run([a.helper, "rrc", str(W), str(H), str(N), "7"], check=True, capture_output=True, text=True)
    ours = np.array([[int(v) for v in line.split()] for line in res.stdout.splitlines()])
    assert ours.shape == (N, 4), ours.shape
    assert (ours[:, 2] > 0).all() and (ours[:, 3] > 0).all()
    assert (ours[:, 0] + ours[:, 2] <= H).all() and (ours[:, 1] + ours[:, 3] <= W).all()
    torch.manual_seed(0)
    dummy = Image.new("RGB", (W, H))
    tv = np.array([T.RandomResizedCrop.get_params(dummy, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(N)])
    for label, f in [
        ("area fraction", lambda b: b[:, 2] * b[:, 3] / (W * H)),
        ("aspect w/h", lambda b: b[:, 3] / b[:, 2]),
        ("centre x", lambda b: (b[:, 1] + b[:, 3] / 2) / W),
        ("centre y", lambda b: (b[:, 0] + b[:, 2] / 2) / H),
    ]:
        mo, mt = f(ours).mean(), f(tv).mean()
        rel = abs(mo - mt) / mt
        status = "ok" if rel < 0.05 else "FAIL"
        print("rrc %-13s lade %.4f torchvision %.4f (%.1f%%) %s" % (label, mo, mt, 100 * rel, status))
        if status != "ok":
            failures.append(("rrc", label))

    print("worst per-channel MAE %.3f (uint8 units)" % worst)
    if failures:
        print("FAILED: %s" % failures)
        return 1
    print("all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
