"""UCX that cannot be opened on one rank, under torchrun with a gloo group
(tests/ucx/test_ucx.sh): the C library opens libucp on first use, and here
rank 1 names one that does not exist (LADE_UCX_LIB) before it does. The
address exchange is collective, so every rank must take the same way, and
none may wait for the others:
  auto: every rank goes on without the UCX transport (routes read from
        storage, the C library's note) and trains on its samples, each once;
  ucx:  every rank fails with an error naming rank 1.
usage: torchrun --nproc_per_node=2 ucx_missing.py auto|ucx DIR"""
import os
import sys

import numpy as np
import torch.distributed as dist

import lade

N, SZ, B = 64, 128, 4


def main():
    mode, root = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 1:
        os.environ["LADE_UCX_LIB"] = "/nonexistent/libucp.so.0"
    if rank == 0:
        os.makedirs(os.path.join(root, "c0"), exist_ok=True)
        for i in range(N):
            with open(os.path.join(root, "c0", "f%03d.bin" % i), "wb") as f:
                f.write(bytes((i * 13 + k) % 256 for k in range(SZ)))
    dist.barrier()
    seen = []
    try:
        with lade.Loader(root, transform="raw", raw_size=SZ, batch_size=B, epochs=1, seed=3, threads=2,
                         drop_last=True, plan="locality", cache_mem_bytes=N * (SZ + 64), transport=mode,
                         peer_timeout_ms=20000, output="numpy", meta=True) as L:
            for x, _y, m in L:
                seen += [int(i) for i in np.asarray(m.indices)]
            peer = L.stats()["peer_messages_sent"]
    except lade.Error as e:
        ok = mode == "ucx" and "rank(s) 1" in str(e)
        print("%s rank %d: %s" % ("ok" if ok else "FAIL", rank, e), flush=True)
        dist.destroy_process_group()
        return 0 if ok else 1
    everyone = [None] * world
    dist.all_gather_object(everyone, seen)
    every = sorted(i for s in everyone for i in s)
    ok = mode == "auto" and every == list(range(N)) and peer == 0
    print("%s rank %d: %d samples, all %d of the dataset once: %s, peer messages %d"
          % ("ok" if ok else "FAIL", rank, len(seen), N, every == list(range(N)), peer), flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
