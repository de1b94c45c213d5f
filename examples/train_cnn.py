#!/usr/bin/env python3
"""Train a tiny CNN for a few steps, fed by lade (zero-copy torch tensors).

    python3 examples/train_cnn.py --data DIR [--steps 20] [--batch-size 32] [--device cuda]

DIR is an ImageFolder of JPEGs (transform imagenet-train, --crop 64 keeps it
fast) or a folder of .npy samples shaped C,H,W (e.g. made by
`lade gen npy DIR --count 512 --shape 3,32,32`). Prints one line per step and,
at the end, `final loss L after N steps`. With --device cuda the batches
arrive in GPU memory, copied on lade's own stream (docs/device.md), and the
model trains there.
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import lade


class TinyCNN(nn.Module):
    def __init__(self, channels=3, classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(channels, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.relu(self.c2(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--crop", type=int, default=64, help="crop size for JPEG datasets")
    ap.add_argument("--transform", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N: batches delivered on the GPU")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    settings = {"device": args.device} if args.device != "cpu" else {}
    if args.transform.startswith("imagenet"):
        settings["crop_size"] = args.crop
    loader = lade.Loader(args.data, transform=args.transform, batch_size=args.batch_size,
                         seed=args.seed, threads=args.threads, output="torch", **settings)
    model = None
    opt = None
    t0 = time.time()
    loss = None
    step = 0
    with loader:
        epoch = 0
        while step < args.steps:
            loader.set_epoch(epoch)  # as with DistributedSampler (lade would also advance by itself)
            epoch += 1
            for images, labels in loader:  # one epoch, as with a DataLoader
                if images.dtype != torch.float32:
                    images = images.float()
                if model is None:
                    model = TinyCNN(channels=images.shape[1]).to(images.device)
                    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
                labels = labels.clamp(min=0)  # -1 (no class) would be an invalid target
                loss = F.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                print("step %3d  loss %.4f  batch %s" % (step, loss.item(), tuple(images.shape)), flush=True)
                if step == args.steps:
                    break
        state = loader.state_dict()
    if loss is None or not torch.isfinite(loss):
        print("training failed", file=sys.stderr)
        return 1
    print("final loss %.4f after %d steps in %.2f s (resume at epoch %d step %d)"
          % (loss.item(), step, time.time() - t0, state["epoch"], state["step"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
