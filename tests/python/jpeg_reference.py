"""Compares lade's image pipeline with torchvision on PIL images.

lade is reached through the jpeg_crop test helper (tests/tools/jpeg_crop.c).
Everything is made here: JPEGs written by PIL (and rewritten losslessly by
tests/tools/jpeg_transcode for arithmetic coding / restart markers /
progressive scans) and PNGs in every mode. The reference image is
PIL's Image.open(f).convert("RGB"), torchvision's default loader.

1. For each of 10 JPEGs and ~10 crop boxes each:
     reference = torchvision.transforms.functional.resized_crop(pil, top,
                 left, h, w, [224, 224], antialias=True) (+ hflip)
   lade's uint8 HWC output must be bit-identical; its float32 CHW output
   must equal the normalised uint8 output to the bit (ToTensor + Normalize
   in float32).
2. imagenet-eval against Resize(256) + CenterCrop(224): bit-identical, for
   those 10 and for a corpus of ~40 JPEG/PNG variants (1x1 to 4000x3000,
   4:4:4/4:2:2/4:2:0/4:1:1, progressive, arithmetic, restart markers, grey,
   Adobe CMYK; PNG 1/2/4/8/16-bit grey, grey+alpha 8/16, RGB 8/16,
   RGBA 8/16, palette with and without tRNS, interlaced, a PNG named .JPEG),
   plus one train crop of each.
3. decode_scale=auto (the opt-in scaled IDCT) on the images whose short side
   is >= 512: the level difference to torchvision is measured (printed) and
   bounded (max <= 48, mean <= 2.5).
4. Other formats (GIF, BMP, TIFF, WebP, PPM, PGM) fail with
   LADE_EUNSUPPORTED naming the format; other bytes with "not an image".
5. RandomResizedCrop parameter statistics against torchvision's (loosely:
   the RNGs differ).
Exits 77 (skipped) when torch/torchvision/PIL are missing.
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


def cheap_photo(w, h, seed):
    """photo() for large sizes: made at 1/8 size, upscaled, noise added."""
    if w * h <= 1 << 20:
        return photo(w, h, seed)
    small = Image.fromarray(photo(max(1, w // 8), max(1, h // 8), seed), "RGB").resize((w, h), Image.BICUBIC)
    rng = np.random.default_rng(seed)
    noise = rng.integers(-8, 9, (h, w, 1), dtype=np.int16)
    return np.clip(np.asarray(small, dtype=np.int16) + noise, 0, 255).astype(np.uint8)


def png_by_hand(path, arr, color_type, interlace=False):
    """PIL cannot write 16-bit RGB(A)/grey+alpha or Adam7-interlaced PNGs."""
    import struct
    import zlib
    h, w = arr.shape[:2]
    depth = 16 if arr.dtype == np.uint16 else 8
    typ = ">u2" if depth == 16 else "u1"
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in (passes if interlace else [(0, 0, 1, 1)]):
        sub = arr[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            raw += b"".join(b"\0" + sub[y].astype(typ).tobytes() for y in range(sub.shape[0]))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 1)) +
                chunk(b"IEND", b""))


def make_corpus(tmp, transcode):
    """(name, path) of JPEG and PNG variants, all made here."""
    out = []
    jpegs = [  # name, w, h, mode, save options, transcode options
        ("j1x1", 1, 1, "RGB", {}, None),
        ("j2x3", 2, 3, "RGB", {}, None),
        ("j17x9_444", 17, 9, "RGB", {"subsampling": 0}, None),
        ("j1x700", 1, 700, "RGB", {}, None),
        ("j640x1", 640, 1, "RGB", {}, None),
        ("j511x383", 511, 383, "RGB", {}, None),
        ("j700x520_422", 700, 520, "RGB", {"subsampling": 1}, None),
        ("j801x613_444", 801, 613, "RGB", {"subsampling": 0}, None),
        ("j4000x3000", 4000, 3000, "RGB", {}, None),
        ("j1200x900_prog", 1200, 900, "RGB", {"progressive": True}, None),
        ("j520x700_arith", 520, 700, "RGB", {}, ["arith"]),
        ("j333x250_arith_prog", 333, 250, "RGB", {}, ["arith", "progressive"]),
        ("j640x480_rst", 640, 480, "RGB", {}, ["restart=1"]),
        ("j300x200_prog_rst", 300, 200, "RGB", {"progressive": True}, ["restart=5"]),
        ("j450x300_gray", 450, 300, "L", {}, None),
        ("j900x600_gray_arith", 900, 600, "L", {}, ["arith"]),
        ("j320x240_cmyk", 320, 240, "CMYK", {}, None),
        ("j1024x768_cmyk_prog", 1024, 768, "CMYK", {"progressive": True}, None),
        ("j250x250_q50_411", 250, 250, "RGB", {"quality": 50, "subsampling": "4:1:1"}, None),
    ]
    for i, (name, w, h, mode, opts, tr) in enumerate(jpegs):
        im = Image.fromarray(cheap_photo(w, h, 50 + i), "RGB")
        if mode != "RGB":
            im = im.convert(mode)
        path = os.path.join(tmp, name + ".jpg")
        im.save(path, **dict({"quality": 90}, **opts))
        if tr:
            subprocess.run([transcode, path, path + ".t"] + tr, check=True)
            os.replace(path + ".t", path)
        out.append((name, path))

    rng = np.random.default_rng(5)
    base = cheap_photo(300, 226, 99)
    alpha = rng.integers(0, 256, (226, 300), dtype=np.uint8)
    wide = (base.astype(np.uint16) * 257 + rng.integers(0, 257, base.shape)).astype(np.uint16)

    def save(name, im, **kw):
        path = os.path.join(tmp, name)
        im.save(path, "PNG", **kw)
        out.append((name, path))
    rgb = Image.fromarray(base, "RGB")
    save("p_rgb8.png", rgb)
    save("p_rgba8.png", Image.fromarray(np.dstack([base, alpha]), "RGBA"))
    save("p_gray8.png", rgb.convert("L"))
    save("p_graya8.png", Image.fromarray(np.dstack([base[..., 0], alpha]), "LA"))
    save("p_pal.png", rgb.convert("P", palette=Image.ADAPTIVE, colors=200))
    pal = rgb.convert("P", palette=Image.ADAPTIVE, colors=16)
    save("p_pal4_trns.png", pal, transparency=3, bits=4)
    save("p_gray1.png", rgb.convert("1"))
    save("p_gray2.png", rgb.convert("L").point(lambda v: v // 64 * 85), bits=2)
    save("p_gray4.png", rgb.convert("L").point(lambda v: v // 16 * 17), bits=4)
    save("p_gray16_small.png", Image.fromarray((wide[..., 0] // 300).astype(np.uint16)))  # mostly < 256
    save("p_gray16.png", Image.fromarray(wide[..., 1]))  # PIL clips: white
    save("p_1x1.png", Image.fromarray(base[:1, :1], "RGB"))
    save("p_big_3000x2000.png", Image.fromarray(cheap_photo(3000, 2000, 7), "RGB"), compress_level=1)
    for name, arr, ct in (("p_rgb16.png", wide, 2), ("p_rgba16.png", np.dstack([wide, wide[..., :1] // 3]), 6),
                          ("p_graya16.png", np.dstack([wide[..., 2], wide[..., 0]]), 4)):
        path = os.path.join(tmp, name)
        png_by_hand(path, arr, ct)
        out.append((name, path))
    for name, arr, ct in (("p_rgb8_adam7.png", base[:101, :77], 2), ("p_rgb16_adam7.png", wide[:50, :61], 2)):
        path = os.path.join(tmp, name)
        png_by_hand(path, arr, ct, interlace=True)
        out.append((name, path))
    # A PNG named like an ImageNet JPEG (n02105855_2933.JPEG is one).
    path = os.path.join(tmp, "n02105855_2933.JPEG")
    rgb.save(path, "PNG")
    out.append(("png_named_JPEG", path))
    return out


def pil_rgb(path):
    """Image.open(path).convert("RGB"), with the whole file as one decoder
    block: libjpeg's arithmetic decoder cannot suspend, so PIL 9.4 with its
    64 KiB blocks raises "broken data stream" on arithmetic-coded baseline
    JPEGs larger than that (lade decodes them; see docs/transform.md)."""
    im = Image.open(path)
    im.decodermaxblock = max(im.decodermaxblock, os.path.getsize(path) + 1)
    return im.convert("RGB")


def eval_reference(pil):
    ev = T.Compose([T.Resize(256), T.CenterCrop(SIZE)])(pil)
    return np.asarray(ev.convert("RGB"), dtype=np.uint8)


def lade_eval(helper, path, tmp, extra=()):
    out = os.path.join(tmp, "eval.raw")
    subprocess.run([helper, "eval", path, "256", str(SIZE), "u8", out] + list(extra), check=True)
    return np.fromfile(out, np.uint8).reshape(SIZE, SIZE, 3)


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
    ap.add_argument("--transcode", required=True)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    rng = np.random.default_rng(1234)
    failures, worst, scaled = [], 0.0, []
    for name, path in make_images(a.tmp):
        pil = Image.open(path).convert("RGB")
        w, h = pil.size
        for k, box in enumerate(boxes_for(w, h, rng)):
            flip = k % 2 == 1
            got = lade_crop(a.helper, path, box, flip, "u8", a.tmp)
            ref = reference(pil, box, flip)
            diff = np.abs(got.astype(np.int32) - ref.astype(np.int32))
            mae = diff.reshape(-1, 3).mean(axis=0)
            worst = max(worst, float(mae.max()))
            status = "ok" if diff.max() == 0 else "FAIL"
            print("%-15s box=%-26s flip=%d mae=%s max=%d %s" % (name, box, flip, np.round(mae, 3), diff.max(), status))
            if status != "ok":
                failures.append((name, box))
            f32 = lade_crop(a.helper, path, box, flip, "f32", a.tmp)
            # ToTensor + Normalize in float32 (div 255, sub mean, div std): equal to the bit
            expect = ((got.astype(np.float32) / np.float32(255) - MEAN) / STD).transpose(2, 0, 1)
            if not np.array_equal(f32.view(np.uint32), expect.view(np.uint32)):
                print("  float32 path differs from normalised uint8 in %d values, max %g"
                      % (int((f32 != expect).sum()), np.abs(f32 - expect).max()))
                failures.append((name, box, "f32"))

        # imagenet-eval: Resize(256) + CenterCrop(224)
        got, ref = lade_eval(a.helper, path, a.tmp), eval_reference(pil)
        diff = np.abs(got.astype(np.int32) - ref.astype(np.int32))
        status = "ok" if diff.max() == 0 else "FAIL"
        print("%-15s eval 256/224 max=%d mean=%.4f %s" % (name, diff.max(), diff.mean(), status))
        if status != "ok":
            failures.append((name, "eval"))
        if min(w, h) >= 512:
            diff = np.abs(lade_eval(a.helper, path, a.tmp, ["auto"]).astype(np.int32) - ref.astype(np.int32))
            scaled.append((name, int(diff.max()), float(diff.mean())))
            print("%-22s decode_scale=auto eval: max %d mean %.3f levels" % scaled[-1])

    # The corpus: eval and one train crop, bit-identical; decode_scale=auto measured.
    for name, path in make_corpus(a.tmp, a.transcode):
        pil = pil_rgb(path)
        w, h = pil.size
        got, ref = lade_eval(a.helper, path, a.tmp), eval_reference(pil)
        d_eval = int(np.abs(got.astype(np.int32) - ref.astype(np.int32)).max())
        bh, bw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        box = (int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1)), bh, bw)
        got = lade_crop(a.helper, path, box, True, "u8", a.tmp)
        d_crop = int(np.abs(got.astype(np.int32) - reference(pil, box, True).astype(np.int32)).max())
        status = "ok" if d_eval == 0 and d_crop == 0 else "FAIL"
        print("%-22s %-5s %4dx%-4d eval max=%d crop %s max=%d %s" % (
            name, Image.open(path).mode, w, h, d_eval, box, d_crop, status))
        if status != "ok":
            failures.append((name, "corpus"))
        if min(w, h) >= 512 and path.endswith(".jpg"):
            got = lade_eval(a.helper, path, a.tmp, ["auto"])
            diff = np.abs(got.astype(np.int32) - ref.astype(np.int32))
            scaled.append((name, int(diff.max()), float(diff.mean())))
            print("%-22s decode_scale=auto eval: max %d mean %.3f levels" % scaled[-1])
    if scaled:
        mx, mean = max(s[1] for s in scaled), max(s[2] for s in scaled)
        print("decode_scale=auto vs torchvision over %d images >= 512 px: max %d levels, worst mean %.3f" % (
            len(scaled), mx, mean))
        if mx > 48 or mean > 2.5:
            failures.append(("decode_scale=auto", mx, mean))

    # Formats torchvision's ImageFolder accepts by name but lade does not decode.
    small = Image.fromarray(photo(40, 30, 3), "RGB")
    others = [("GIF", "x.gif", "GIF"), ("BMP", "x.bmp", "BMP"), ("TIFF", "x.tif", "TIFF"),
              ("WebP", "x.webp", "WEBP"), ("PPM", "x.ppm", "PPM"), ("PGM", "x.pgm", "PPM")]
    for fmt, fname, pil_fmt in others:
        path = os.path.join(a.tmp, fname + ".JPEG")  # the name must not matter
        (small.convert("L") if fmt == "PGM" else small).save(path, pil_fmt)
        res = subprocess.run([a.helper, "check", path], capture_output=True, text=True)
        ok = res.returncode == 1 and "LADE_EUNSUPPORTED" in res.stderr and fmt in res.stderr
        print("%-5s -> %s %s" % (fmt, res.stderr.strip(), "ok" if ok else "FAIL"))
        if not ok:
            failures.append((fmt, "unsupported"))
    path = os.path.join(a.tmp, "notes.jpg")
    with open(path, "w") as f:
        f.write("<html>not an image</html>")
    res = subprocess.run([a.helper, "check", path], capture_output=True, text=True)
    ok = res.returncode == 1 and "LADE_EFORMAT" in res.stderr and "not an image (JPEG or PNG)" in res.stderr
    print("text  -> %s %s" % (res.stderr.strip(), "ok" if ok else "FAIL"))
    if not ok:
        failures.append(("text", "not an image"))

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

    print("worst per-channel MAE of the crops %.3f (uint8 units)" % worst)
    if failures:
        print("FAILED: %s" % failures)
        return 1
    print("all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
