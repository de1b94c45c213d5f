"""tfrecord_files.py - TFRecord files for tests/http/test_http.py's TestHttpTfrecord, written from the format
in pure Python (docs/sources.md, tfrecord; tests/python/test_tfrecord.py has the full encoder): a record is
its length, the length's masked CRC-32C, the data, the data's masked CRC-32C; the data a tf.train.Example as
DLIO writes it (`image` bytes, `size` int64)."""
import os
import struct

_TABLE = []


def crc32c(data):
    if not _TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _TABLE.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data):
    n = struct.pack("<Q", len(data))
    return n + masked(n) + data + masked(data)


def dlio_example(img):
    """A tf.train.Example of `image` (img, below 16 KiB) and `size` (its length, an unpacked int64)."""
    def ld(num, b):  # a length-delimited field, for lengths below 2^14
        n = len(b)
        return bytes([num << 3 | 2]) + (bytes([n]) if n < 128 else bytes([n & 0x7F | 0x80, n >> 7])) + b
    image = ld(1, ld(1, b"image") + ld(2, ld(1, ld(1, img))))
    size = ld(1, ld(1, b"size") + ld(2, ld(3, bytes([8, len(img) & 0x7F | 0x80, len(img) >> 7]))))
    return ld(1, image + size)


def write_dlio(folder, files, per_file, sample_bytes):
    """folder/img_S_of_FILES.tfrecord with per_file records of sample_bytes(S, i) (cut to 4000 bytes), and
    folder/bad.tfrecord: 5 records, a bit of record 2's data flipped."""
    os.makedirs(folder, exist_ok=True)
    for s in range(files):
        with open(os.path.join(folder, "img_%d_of_%d.tfrecord" % (s, files)), "wb") as f:
            for i in range(per_file):
                f.write(record(dlio_example(sample_bytes(s, i)[:4000])))
    recs = [record(dlio_example(sample_bytes(files + 1, i)[:4000])) for i in range(5)]
    bad = bytearray(b"".join(recs))
    bad[len(recs[0]) + len(recs[1]) + 12 + 50] ^= 0x04
    with open(os.path.join(folder, "bad.tfrecord"), "wb") as f:
        f.write(bytes(bad))
