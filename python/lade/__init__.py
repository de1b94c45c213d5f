"""lade: a fast data loader for deep-learning training, zero-copy into PyTorch, JAX and NumPy.

    import lade
    with lade.Loader("/data/imagenet/train", transform="imagenet-train",
                     batch_size=256, epochs=90, seed=1, threads=8) as loader:
        for images, labels in loader:      # torch tensors, no copy of the images
            ...

Every batch's tensor views the batch buffer of lade's pool; the buffer goes
back to the pool when the last view of it is freed. See docs/python.md.
"""
import os as _os

from . import _lade
from ._lade import Array, Batch, Error

__all__ = ["Loader", "Batch", "Array", "Error", "version", "config_keys", "detect_rank"]
__version__ = _lade.version()


def version():
    """The version of liblade inside this module."""
    return _lade.version()


def config_keys():
    """{key: (default, help)} for every setting the C config accepts."""
    return _lade.config_keys()


def _setting_text(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(int(v)) for v in value)
    if isinstance(value, _os.PathLike):
        return _os.fspath(value)
    if value is None:
        return ""
    return str(value)




def detect_rank():
    """(rank, world_size): torch.distributed when initialised, else RANK/WORLD_SIZE,
    else OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else (0, 1)."""
    try:
        import torch.distributed as dist  # noqa: WPS433

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except ImportError:
        pass
    env = _os.environ
    for rk, wk in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rk in env and wk in env:
            return int(env[rk]), int(env[wk])
    return 0, 1


def _torch():
    try:
        import torch  # noqa: WPS433

        return torch
    except ImportError:
        return None


def _numpy():
    import numpy  # noqa: WPS433

    return numpy


_OUTPUTS = ("torch", "numpy", "dlpack")


class Loader:
    """An iterable over lade batches.

    Loader(source, transform="auto", batch_size=32, epochs=1, seed=0, threads=0,
           rank=None, world_size=None, output=None, meta=False, **settings)

    Iterating yields ``(data, labels)`` from the current position to the end of
    the last epoch (``(data, labels, batch)`` with meta=True, where batch is the
    lade.Batch holding indices/epoch/step). ``output`` picks the array type:
    "torch" (default when torch imports), "numpy", or "dlpack" (data is the
    lade.Batch itself, which has ``__dlpack__``; labels a lade.Array).
    Any other keyword is a lade setting (see lade.config_keys()); values are
    validated by the C library and errors raise lade.Error.

    len(loader) is the number of batches of all epochs (steps_per_epoch * epochs).
    """

    def __init__(self, source, transform="auto", batch_size=32, epochs=1, seed=0, threads=0,
                 rank=None, world_size=None, output=None, meta=False, **settings):
        if rank is None or world_size is None:
            r, w = detect_rank()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        if output is None:
            output = "torch" if _torch() is not None else "numpy"
        if output not in _OUTPUTS:
            raise ValueError("output must be one of %s, not %r" % ("|".join(_OUTPUTS), output))
        self.output = output
        self.meta = bool(meta)
        pairs = [("source", _setting_text("source", source)),
                 ("transform", _setting_text("transform", transform)),
                 ("batch_size", _setting_text("batch_size", batch_size)),
                 ("epochs", _setting_text("epochs", epochs)),
                 ("seed", _setting_text("seed", seed)),
                 ("threads", _setting_text("threads", threads)),
                 ("rank", _setting_text("rank", rank)),
                 ("world_size", _setting_text("world_size", world_size))]
        for k, v in settings.items():
            pairs.append((k, _setting_text(k, v)))
        self.settings = dict(pairs)
        self._convert = self._converter(output)
        self._h = _lade.Loader(pairs)

    # ---- conversion
    def _converter(self, output):
        if output == "torch":
            torch = _torch()
            if torch is None:
                raise Error("output='torch' but torch cannot be imported")
            from_dlpack = torch.utils.dlpack.from_dlpack

            def data(b):
                dt = b.dtype
                if dt == "bool":
                    # torch 1.13's from_dlpack rejects DLPack bool: the same bytes as uint8, viewed as bool
                    return from_dlpack(b._dlpack_uint8_bool()).view(torch.bool)
                if getattr(torch, dt, None) is None:
                    # uint16/32/64 before torch 2.3: no tensor type holds them; widening would copy every
                    # batch and change the dtype (and uint64 does not fit int64), so say so instead
                    raise Error("the dataset's dtype is %s, which torch %s has no tensor type for; use "
                                "output='numpy' (exact values) and convert as you need"
                                % (dt, torch.__version__))
                return from_dlpack(b.__dlpack__())

            def conv(b):
                return data(b), from_dlpack(b.labels.__dlpack__())
            return conv
        if output == "numpy":
            np = _numpy()

            def conv(b):
                return np.asarray(b), np.frombuffer(b.labels, dtype=np.int64)
            return conv

        def conv(b):
            return b, b.labels
        return conv

    # ---- iteration
    def next_batch(self):
        """The next lade.Batch, or None after the last epoch."""
        return self._h.next()

    def __iter__(self):
        nxt = self._h.next
        conv = self._convert
        meta = self.meta
        while True:
            b = nxt()
            if b is None:
                return
            if meta:
                yield conv(b) + (b,)
            else:
                out = conv(b)
                if self.output != "dlpack":
                    b.close()  # the tensors hold the buffer now
                yield out

    def __len__(self):
        _, steps, epochs = self._h.info()
        return int(steps * epochs)

    @property
    def steps_per_epoch(self):
        return int(self._h.info()[1])

    @property
    def num_samples(self):
        return int(self._h.info()[0])

    # ---- position and resume
    def tell(self):
        """(epoch, step) of the next batch."""
        return self._h.tell()

    def seek(self, epoch, step=0):
        self._h.seek(int(epoch), int(step))

    _CHECKED = ("source", "batch_size", "seed", "rank", "world_size", "transform")

    def state_dict(self):
        """The position as a dict; load_state_dict() of a loader with the same settings
        continues with exactly the batches this one would have produced next."""
        epoch, step = self._h.tell()
        state = {"version": 1, "epoch": int(epoch), "step": int(step)}
        state["settings"] = {k: self.settings.get(k, "") for k in self._CHECKED}
        return state

    def load_state_dict(self, state):
        if int(state.get("version", 1)) != 1:
            raise Error("unsupported lade state_dict version %r" % (state.get("version"),))
        saved = state.get("settings", {})
        for k in self._CHECKED:
            if k in saved and saved[k] != self.settings.get(k, ""):
                raise Error("load_state_dict: setting '%s' differs (saved %r, this loader %r)"
                            % (k, saved[k], self.settings.get(k, "")))
        self._h.seek(int(state["epoch"]), int(state["step"]))

    # ---- misc
    def stats(self):
        return self._h.stats()

    def epoch_stats(self, epoch):
        """Per-epoch metrics (DELI's): miss_rate, wait_seconds, get_requests,
        list_requests, remote_bytes, samples/bytes_by_source (storage, memory,
        disk, peer). Raises for an epoch that has not started."""
        return self._h.epoch_stats(epoch)

    def interrupt(self):
        self._h.interrupt()

    def close(self):
        """Stops the workers. Tensors already handed out stay valid."""
        self._h.close()

    @property
    def closed(self):
        return self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "lade.Loader(%r, output=%r)" % (self.settings.get("source"), self.output)
