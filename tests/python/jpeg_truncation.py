"""Truncated JPEGs and broken PNGs: one verdict per file, PIL's.

For several JPEGs (baseline 4:2:0 / 4:4:4, progressive, restart markers,
arithmetic coding, grey, Adobe CMYK) cut at many points (fractions of the
file from 1% to 99.9%, and the last 1, 2, 3 bytes), imagenet-train with
seeds 0..N-1 (tests/tools/jpeg_crop "seeds") must give the same verdict for
every seed, and that verdict must be PIL 9.4's for
Image.open(f).convert("RGB") (torchvision's loader): error iff PIL raises.
A crop that happens to need only the rows before the cut used to decode
fine, so the verdict changed with the seed. PNGs cut inside IDAT or with a
flipped byte in a critical chunk must fail cleanly (LADE_EFORMAT) for every
seed. Exits 77 (skipped) when numpy/PIL are missing.
"""
import argparse
import io
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jpeg_reference import photo  # noqa: E402

NSEEDS = 40
FRACTIONS = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999]


def pil_verdict(data):
    try:
        Image.open(io.BytesIO(data)).convert("RGB")
        return "ok"
    except Exception as e:  # OSError "image file is truncated", SyntaxError, ...
        return "error (%s: %s)" % (type(e).__name__, str(e)[:50])


def lade_verdicts(helper, path):
    res = subprocess.run([helper, "seeds", path, "64", str(NSEEDS)], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("helper failed: %s" % res.stderr)
    return res.stdout.split()


def make_jpegs(tmp, transcode):
    out = []
    specs = [  # name, w, h, mode, save options, transcode options
        ("base420", 400, 300, "RGB", {}, None),
        ("base444", 333, 250, "RGB", {"subsampling": 0}, None),
        ("prog", 400, 300, "RGB", {"progressive": True}, None),
        ("restart", 400, 300, "RGB", {}, ["restart=3"]),
        ("arith", 320, 240, "RGB", {}, ["arith"]),
        ("arith_prog_rst", 320, 240, "RGB", {}, ["arith", "progressive", "restart=2"]),
        ("gray", 300, 200, "L", {}, None),
        ("cmyk", 240, 180, "CMYK", {}, None),
    ]
    for i, (name, w, h, mode, opts, tr) in enumerate(specs):
        im = Image.fromarray(photo(w, h, 100 + i), "RGB")
        if mode != "RGB":
            im = im.convert(mode)
        path = os.path.join(tmp, name + ".jpg")
        im.save(path, quality=90, **opts)
        if tr:
            subprocess.run([transcode, path, path + ".t"] + tr, check=True)
            os.replace(path + ".t", path)
        out.append((name, path))
    # An APP1 segment holding a whole small JPEG (as EXIF thumbnails do): its
    # FF D9 must not count as the end of the outer file.
    base = open(out[0][1], "rb").read()
    thumb = io.BytesIO()
    Image.fromarray(photo(16, 16, 1), "RGB").save(thumb, "JPEG")
    payload = b"Exif\0\0" + thumb.getvalue()
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    path = os.path.join(tmp, "thumb.jpg")
    with open(path, "wb") as f:
        f.write(base[:2] + app1 + base[2:])
    out.append(("thumb", path))
    # Bytes after the EOI (PIL ignores them).
    path = os.path.join(tmp, "trailing.jpg")
    with open(path, "wb") as f:
        f.write(base + b"\0trailing garbage\xff\xd8")
    out.append(("trailing", path))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helper", required=True)
    ap.add_argument("--transcode", required=True)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    failures, checked, pil_ok = [], 0, 0
    cut_path = os.path.join(a.tmp, "cut.bin")
    for name, path in make_jpegs(a.tmp, a.transcode):
        data = open(path, "rb").read()
        n = len(data)
        cuts = sorted({int(n * f) for f in FRACTIONS} | {n - 1, n - 2, n - 3, n})
        for cut in cuts:
            piece = data[:cut]
            with open(cut_path, "wb") as f:
                f.write(piece)
            pv = pil_verdict(piece)
            ours = lade_verdicts(a.helper, cut_path)
            kinds = sorted(set(ours))
            expect = "ok" if pv == "ok" else "LADE_EFORMAT"
            checked += 1
            pil_ok += pv == "ok"
            if len(kinds) != 1 or kinds[0] != expect:
                print("FAIL %-15s cut %6d/%d: PIL %s, lade %s" % (
                    name, cut, n, pv, {k: ours.count(k) for k in kinds}))
                failures.append((name, cut))
    print("jpeg: %d truncations checked x %d seeds (%d where PIL decodes)" % (checked, NSEEDS, pil_ok))

    # PNG: cut inside the image data, or a byte flipped inside IHDR/IDAT.
    im = Image.fromarray(photo(200, 150, 7), "RGB")
    buf = io.BytesIO()
    im.save(buf, "PNG")
    data = buf.getvalue()
    idat = data.index(b"IDAT")
    broken = [("cut%d" % c, data[:c]) for c in (idat + 100, (idat + len(data)) // 2, len(data) - 20)]
    for off in (20, 31, idat + 50):  # IHDR height, IHDR's CRC, IDAT data
        b = bytearray(data)
        b[off] ^= 0x10
        broken.append(("flip%d" % off, bytes(b)))
    for label, piece in broken:
        with open(cut_path, "wb") as f:
            f.write(piece)
        ours = lade_verdicts(a.helper, cut_path)
        if set(ours) != {"LADE_EFORMAT"}:
            print("FAIL png %s: %s (PIL: %s)" % (label, sorted(set(ours)), pil_verdict(piece)))
            failures.append(("png", label))
        else:
            res = subprocess.run([a.helper, "check", cut_path], capture_output=True, text=True)
            print("png %-9s -> %s (PIL: %s)" % (label, res.stderr.strip(), pil_verdict(piece)))
    if failures:
        print("FAILED: %s" % failures)
        return 1
    print("all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
