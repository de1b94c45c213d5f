"""DLPack interop on the device (tests/gpu/run.sh): CuPy and JAX take lade's
CUDA batches through __dlpack__ with their own streams, and see the host
run's bytes."""
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import numpy as np  # noqa: E402

import lade  # noqa: E402


def main():
    src = "/tmp/lade-gpu-data/npy"  # parity.py made it
    out = []
    for name in ("cupy", "jax"):
        try:
            mod = __import__(name)
        except ImportError as e:
            out.append("%s: not installed (%s)" % (name, e))
            continue
        dev = lade.Loader(src, device="cuda", output="dlpack", batch_size=32, epochs=2, seed=3)
        host = lade.Loader(src, output="numpy", batch_size=32, epochs=2, seed=3)
        n = bad = 0
        for (b, _), (hx, _) in zip(dev.stream(), host.stream()):
            if name == "cupy":
                got = mod.asnumpy(mod.from_dlpack(b))
            else:
                import jax.dlpack
                got = np.asarray(jax.dlpack.from_dlpack(b))
            bad += not np.array_equal(got, hx)
            n += 1
            del b
        dev.close()
        host.close()
        out.append("%s %s: %d batches from lade's CUDA batches, %d differ from the host run"
                   % (name, mod.__version__, n, bad))
        if bad or not n:
            print("\n".join(out))
            return 1
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
