"""lade: a fast data loader for deep-learning training, zero-copy into PyTorch, JAX and NumPy.

    import lade
    with lade.Loader("/data/imagenet/train", transform="imagenet-train",
                     batch_size=256, epochs=90, seed=1, threads=8) as loader:
        for images, labels in loader:      # torch tensors, no copy of the images
            ...

Every batch's tensor views the batch buffer of lade's pool; the buffer goes
back to the pool when the last view of it is freed. See docs/python.md.
"""
import collections.abc as _abc
import functools as _functools
import importlib as _importlib
import operator as _operator
import os as _os
import sys as _sys

from . import _lade
from ._lade import Array, Batch, Error

__all__ = ["Loader", "Batch", "Array", "Error", "version", "features", "config_keys", "detect_rank"]
__version__ = _lade.version()


def _error(name, message):
    """lade.Error with the library's code and name (e.name == "LADE_ERANGE"), for a refusal made here."""
    e = Error(message)
    e.name, e.code = name, getattr(_lade, name)
    return e


def version():
    """The version of liblade inside this module."""
    return _lade.version()


def features():
    """The optional dependencies built into this module's liblade (lade_features()), as a
    frozenset of names from jpeg, png, curl (the s3 source and http(s):// shards), mpi
    (plans across ranks over MPI), ucx, hdf5, zlib, and cuda when the CUDA runtime (opened on
    first use; LADE_CUDA_LIB names it) found a device. `"curl" in lade.features()`."""
    return frozenset(_lade.features().split())


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
    dist = _import_optional("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    env = _os.environ
    for rk, wk in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rk in env and wk in env:
            return int(env[rk]), int(env[wk])
    return 0, 1


def _ucx_bootstrap(settings, rank, world_size):
    """Under torch.distributed, before a loader that the UCX transport may
    carry (transport auto or ucx, a plan that routes samples, no MPI
    launcher): every rank's UCX address goes to every rank through
    all_gather_object, once per process (docs/transport.md, UCX). Collective:
    every rank creates its loaders in the same order, as the transport
    needs anyway. Returns "local" where the loader is to go on without it."""
    world_size = int(world_size)
    if world_size <= 1 or "ucx" not in features() or ("ucx", rank, world_size) in _UCX_DONE:
        return
    transport = str(settings.get("transport", "auto"))
    plan = str(settings.get("plan", "regular"))
    env = _os.environ
    mpi = "OMPI_COMM_WORLD_SIZE" in env or "PMI_SIZE" in env
    if transport != "ucx" and (transport != "auto" or plan in ("regular", "shards") or mpi):
        return
    dist = _import_optional("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return  # the C library's rendezvous_dir, or its error saying what to do
    if dist.get_world_size() != world_size or dist.get_rank() != int(rank):
        raise Error("rank %s of %d given, but torch.distributed runs rank %d of %d: the UCX transport's "
                    "addresses are exchanged over the default process group, so its ranks must be the loader's "
                    "(or set transport='local', or rendezvous_dir and job_id)"
                    % (rank, world_size, dist.get_rank(), dist.get_world_size()))
    # UCX is opened here (the C library loads libucp on first use); a rank
    # where that fails still joins the exchange with an empty address, so
    # every rank takes the same way: an error everywhere (transport='ucx'),
    # or none of them with peers (auto: routes read from storage, with the
    # C library's note)
    why = ""
    try:
        mine = _lade.ucx_address()
    except Error as e:
        mine, why = "", str(e)
    addresses = [None] * world_size
    dist.all_gather_object(addresses, mine)
    missing = [r for r, a in enumerate(addresses) if not a]
    if missing:
        if transport == "ucx":
            raise Error("transport=ucx: UCX could not be opened on rank(s) %s%s"
                        % (", ".join(map(str, missing)), ": " + why if why else ""))
        if why and int(rank) == missing[0]:
            _sys.stderr.write("lade: note: UCX could not be opened on rank(s) %s (%s): the loaders go on without "
                              "the UCX transport, and samples the plan routes to peers are read from storage\n"
                              % (", ".join(map(str, missing)), why))
        return "local"
    _lade.ucx_set_peers(int(rank), [str(a) for a in addresses])
    _UCX_DONE.add(("ucx", rank, world_size))


_UCX_DONE = set()


def _import_optional(name):
    """The module, or None when it is not installed. A Ctrl-C while torch's C
    extension initialises comes out of its import as RuntimeError("KeyboardInterrupt:
    <EMPTY MESSAGE>...") (its C++ layer wraps every Python error): it is raised here
    as the KeyboardInterrupt it is."""
    try:
        return _importlib.import_module(name)
    except ImportError:
        return None
    except RuntimeError as e:
        if str(e).startswith("KeyboardInterrupt"):
            raise KeyboardInterrupt() from None
        raise


def _torch():
    return _import_optional("torch")


def _torch_stream(torch, b):
    """The DLPack stream number of torch's current stream on b's device (1: the legacy default stream)."""
    s = torch.cuda.current_stream(b.device).cuda_stream
    return s if s else 1


def _numpy():
    import numpy  # noqa: WPS433

    return numpy


_OUTPUTS = ("torch", "numpy", "dlpack")

_FORK_ADVICE = ("lade parallelises loading itself (its threads setting): iterate one "
                "lade.Loader(..., threads=N) in the training process instead of wrapping it in "
                "torch.utils.data.DataLoader(num_workers>0), whose workers would each load (and yield) "
                "every batch")


def _no_workers():
    """Raises inside a torch DataLoader worker process."""
    import sys  # noqa: WPS433

    data = sys.modules.get("torch.utils.data")
    info = getattr(data, "get_worker_info", None) if data is not None else None
    if info is not None and info() is not None:
        raise Error("lade.Loader used in a torch DataLoader worker process (worker %d of %d). %s"
                    % (info().id, info().num_workers, _FORK_ADVICE))


class Loader:
    """An iterable over lade batches.

    Loader(source, transform="auto", batch_size=32, epochs=None, seed=0, threads=0,
           rank=None, world_size=None, output=None, meta=False, **settings)

    As torch's DataLoader: each ``iter(loader)`` is one epoch, so
    ``for epoch in range(E): for x, y in loader:`` trains E epochs, and
    ``len(loader)`` is the number of batches of one epoch. Each epoch is
    shuffled anew (keyed by seed and epoch); ``set_epoch(e)`` picks the epoch
    the next ``iter()`` yields, as DistributedSampler.set_epoch does. The
    last batch is short (``drop_last=False``) or dropped (``drop_last=True``);
    with world_size > 1 the epoch is padded to a multiple of world_size as
    DistributedSampler pads it, and ``batch.valid`` (meta=True) counts the
    real samples, which always come first. ``stream()`` yields every
    remaining batch of every epoch in one loop.

    Iterating yields ``(data, labels)`` (``(data, labels, batch)`` with
    meta=True, where batch is the lade.Batch holding indices/epoch/step/valid).
    ``output`` picks the array type: "torch" (default when torch imports),
    "numpy", or "dlpack" (data is the lade.Batch itself, which has
    ``__dlpack__``; labels a lade.Array). ``device="cuda"`` (or "cuda:N";
    "cuda" is torch's current device) delivers data and labels in GPU
    memory, copied on lade's own stream, with DLPack's stream protocol: the
    current stream waits for the copy on the GPU (docs/device.md).
    ``epochs=None`` (the default) lets
    you iterate as many epochs as you like; a number ends the loader after
    that many. Any other keyword is a lade setting (see lade.config_keys());
    values are validated by the C library and errors raise lade.Error. The
    dataset is listed when the loader is created: a missing or empty dataset
    raises here.

    The workers never stop at an epoch boundary: while you finish an epoch
    the first batches of the next are already being prepared.
    """

    # epochs=None: as many as the caller iterates (the C library's largest epochs)
    _UNBOUNDED_EPOCHS = 1000000000

    def __init__(self, source, transform="auto", batch_size=32, epochs=None, seed=0, threads=0,
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
        self.epochs = epochs
        if epochs is None:
            epochs = self._UNBOUNDED_EPOCHS
        self._resume = False  # the position was set by seek/load_state_dict: the next iter() starts there
        if str(settings.get("device", "")) == "cuda":
            # torch's current device (torch.cuda.set_device, as torchrun scripts call it), whichever copy of the
            # CUDA runtime lade opens
            torch = _torch()
            if torch is not None and torch.cuda.is_available():
                settings["device"] = "cuda:%d" % torch.cuda.current_device()
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
        # what the loader was made with, secrets masked (S3 credentials never show in logs or repr)
        self.settings = {k: ("***" if v and _lade.is_secret(k) else v) for k, v in pairs}
        self._on_device = str(self.settings.get("device", "cpu")) not in ("cpu", "")
        self._convert = self._converter(output)
        _no_workers()
        if _ucx_bootstrap(settings, rank, world_size) == "local":
            pairs.append(("transport", "local"))  # the last value of a setting is the one used
        self._pairs = pairs
        self._start_pos = None  # the position the handle was opened at (load_state_dict)
        self._h = _lade.Loader(pairs)

    def __reduce_ex__(self, protocol):
        raise Error("a lade.Loader cannot be pickled or sent to another process. " + _FORK_ADVICE)

    # ---- conversion
    def _converter(self, output):
        on_device = self._on_device
        if output == "torch":
            torch = _torch()
            if torch is None:
                raise Error("output='torch' but torch cannot be imported")
            from_dlpack = torch.utils.dlpack.from_dlpack

            def data(b):
                dt = b.dtype
                if dt == "bool":
                    # torch 1.13's from_dlpack rejects DLPack bool: the same bytes as uint8, viewed as bool
                    kw = {"stream": _torch_stream(torch, b)} if on_device else {}
                    return from_dlpack(b._dlpack_uint8_bool(**kw)).view(torch.bool)
                if getattr(torch, dt, None) is None:
                    # uint16/32/64 before torch 2.3: no tensor type holds them; widening would copy every
                    # batch and change the dtype (and uint64 does not fit int64), so say so instead
                    raise Error("the dataset's dtype is %s, which torch %s has no tensor type for; use "
                                "output='numpy' (exact values) and convert as you need"
                                % (dt, torch.__version__))
                if on_device:
                    # the protocol: torch passes its current stream, which waits (on the GPU) for lade's copy
                    return from_dlpack(b)
                return from_dlpack(b.__dlpack__())

            if on_device:
                def conv(b):
                    x = data(b)  # first: the stream's wait covers the labels' copy too
                    return x, from_dlpack(b._device_labels())
                return conv

            def conv(b):
                return data(b), from_dlpack(b.labels.__dlpack__())
            return conv
        if on_device and output == "numpy":
            raise Error("output='numpy' with device=%s: the batches are in GPU memory; use output='torch' or "
                        "'dlpack' (CuPy, JAX: from_dlpack(batch))" % self.settings.get("device"))
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

    def _yield(self, count):
        # a C iterator, not a generator: a batch taken from the loader is
        # either handed to the for loop or put back (Ctrl-C, an exception in
        # the conversion), and an interrupted iterator can go on
        _no_workers()
        return _lade.Iter(self._h, self._convert, -1 if count is None else count, self.meta,
                          not self.meta and self.output != "dlpack")

    def __iter__(self):
        """One epoch: the epoch the loader stands in, from its start, or, right
        after load_state_dict()/seek(), from the position loaded. An iteration
        left early (break, or an exception in the loop's body) is started
        again from its first batch by the next iter(), as a new pass over a
        DataLoader would be; one that lade itself stopped (Ctrl-C or
        interrupt() while it waited for a batch) is continued, from the batch
        it did not hand out."""
        _no_workers()
        epoch, step = self._h.tell()
        first = self._first_step(epoch)
        if step != first and not self._resume and not self._h.interrupted:
            self._h.seek(epoch, first)
            step = first
        self._resume = False
        steps = self.steps_per_epoch
        return self._yield(steps - step if steps else 0)

    def stream(self):
        """Every remaining batch of every epoch, from the current position to
        the end of the last epoch (forever with epochs=None), in one loop; the
        batch's epoch is ``batch.epoch`` (meta=True)."""
        self._resume = False
        return self._yield(None)

    def set_epoch(self, epoch):
        """As DistributedSampler.set_epoch: the next iter() yields epoch
        `epoch` from its first batch. A loader that a load_state_dict()/seek()
        put inside that epoch (a resumed run) continues there instead. An
        epoch out of this loader's range (negative, past its epochs) raises
        lade.Error naming it and the range; one that is no integer TypeError."""
        epoch = _operator.index(epoch)
        e, s = self._h.tell()
        first = self._first_step(epoch)
        if e == epoch and (s == first or self._resume):
            return
        self._h.seek(epoch, first, "set_epoch")
        self._resume = False

    def _first_step(self, epoch):
        # a loader resumed at another layout starts its first epoch at a later step
        e, s = self._h.start()
        return s if epoch == e else 0

    def __len__(self):
        """Batches of one epoch on this learner, as len(DataLoader)."""
        return int(self._h.info()[1])

    @property
    def steps_per_epoch(self):
        return int(self._h.info()[1])

    @property
    def num_samples(self):
        return int(self._h.info()[0])

    # ---- the dataset's classes and samples (torchvision ImageFolder's attributes)
    @_functools.cached_property
    def classes(self):
        """Class names, sorted; label i is classes[i]. [] when the dataset has no
        classes (a flat folder: every label is -1)."""
        return self._h.classes()

    @_functools.cached_property
    def class_to_idx(self):
        """{class name: label}."""
        return {c: i for i, c in enumerate(self.classes)}

    @_functools.cached_property
    def samples(self):
        """[(path, label), ...] by dataset index (the indices of Batch.indices):
        for a folder, exactly torchvision ImageFolder(root).samples."""
        return self._h.samples()

    @_functools.cached_property
    def targets(self):
        """[label, ...] by dataset index."""
        return [s[1] for s in self.samples]

    # ---- position and resume
    def tell(self):
        """(epoch, step) of the next batch."""
        return self._h.tell()

    def seek(self, epoch, step=0):
        """Positions the loader so the next batch is (epoch, step); the next
        iter() yields the rest of that epoch. Values out of range (negative,
        past the last epoch or step) raise lade.Error naming the value and
        the range; values that are no integers TypeError."""
        self._h.seek(epoch, step)
        self._resume = True

    # settings a state must share with the loader that loads it; world_size, rank and
    # batch_size may differ (the rest of the epoch is re-striped, docs/plan.md "Resume")
    _CHECKED = ("source", "seed", "transform", "plan", "drop_last")
    _SAVED = ("source", "batch_size", "seed", "rank", "world_size", "transform", "plan", "drop_last",
              "model_parallel")
    _POSITION = ("epoch", "consumed", "shuffle_epoch", "world_size", "batch_size", "groups", "kind", "samples",
                 "seed", "base_consumed", "base_groups", "base_batch")

    def state_dict(self):
        """The position as a dict. It is global, as Mosaic Streaming's is: what
        all ranks together have consumed, so rank 0's state resumes every rank,
        also at another world size or batch size (load_state_dict)."""
        epoch, step = self._h.tell()
        state = {"version": 2, "epoch": int(epoch), "step": int(step),
                 "position": dict(zip(self._POSITION, (int(v) for v in self._h.position())))}
        state["settings"] = {k: self.settings.get(k, "") for k in self._SAVED}
        return state

    _STATE_HELP = ("a lade state dict is what Loader.state_dict() returns: a dict with 'epoch' and 'step' "
                   "(integers >= 0), and optionally 'version' (1 or 2), 'position' (a dict, version 2) and "
                   "'settings' (a dict)")

    @classmethod
    def _state_int(cls, state, key, where=""):
        """state[key] as an int (anything with __index__ but bool); `where` names
        the dict it is in ("position")."""
        v = state[key]
        field = "%s[%r]" % (where, key) if where else repr(key)
        if isinstance(v, bool):
            raise Error("load_state_dict: %s is %r, not an integer; %s" % (field, v, cls._STATE_HELP))
        try:
            return _operator.index(v)
        except TypeError:
            raise Error("load_state_dict: %s is %r (%s), not an integer; %s"
                        % (field, v, type(v).__name__, cls._STATE_HELP)) from None

    # the width of each position field (lade_position_t): a value is checked as written, never wrapped
    _U32 = ("world_size", "batch_size", "groups", "base_groups", "base_batch")

    def _saved_position(self, saved, epoch, step):
        """The version 2 state's position as a tuple, every field checked as the
        user wrote it (type, its C field's width, its own range, and agreement
        with the state's outer epoch and step) before anything is closed."""
        if not isinstance(saved, _abc.Mapping):
            raise Error("load_state_dict: 'position' is %s, not a dict; %s" % (type(saved).__name__, self._STATE_HELP))
        miss = [k for k in self._POSITION if k not in saved]
        if miss:
            raise Error("load_state_dict: the state's position has no %s; %s" % (", ".join(miss), self._STATE_HELP))
        extra = sorted(str(k) for k in saved if k not in self._POSITION)
        if extra:
            raise Error("load_state_dict: the state's position has keys this lade does not know: %s (a state of a "
                        "newer lade, or edited?); %s" % (", ".join(repr(k) for k in extra), self._STATE_HELP))
        p = {}
        for k in self._POSITION:
            v = p[k] = self._state_int(saved, k, "position")
            lo, hi, what = ((-2 ** 31, 2 ** 31 - 1, "an int32") if k == "kind" else
                            (0, 2 ** 32 - 1, "a uint32") if k in self._U32 else (0, 2 ** 64 - 1, "a uint64"))
            if not lo <= v <= hi:
                raise _error("LADE_ERANGE", "load_state_dict: position['%s'] %d is out of range: %s, %d to %d"
                             % (k, v, what, lo, hi))
        samples, _spe, epochs = self._h.info()
        shards = self.settings.get("plan") == "shards"

        def bad(k, why, name="LADE_EINVAL"):
            raise _error(name, "load_state_dict: position['%s'] %d %s" % (k, p[k], why))
        if p["epoch"] > epochs:
            bad("epoch", "is out of range: epochs are 0 to %d on this loader (%d epochs; %d is the end)"
                % (epochs - 1, epochs, epochs), "LADE_ERANGE")
        if p["shuffle_epoch"] > epochs or (p["epoch"] == epochs) != (p["shuffle_epoch"] == epochs):
            bad("shuffle_epoch", "is out of range: the epoch order of epoch %d is one of 0 to %d (%d at the end)"
                % (p["epoch"], epochs - 1, epochs), "LADE_ERANGE")
        if p["shuffle_epoch"] != p["epoch"] and self.settings.get("plan") != "solar":
            bad("shuffle_epoch", "is not position['epoch'] %d: only plan solar reorders epochs" % p["epoch"])
        for k in ("world_size", "batch_size", "groups"):
            if not p[k]:
                bad(k, "is not a layout a state is saved at (1 or more)")
        if p["groups"] > p["world_size"] or p["world_size"] % p["groups"] or (not shards and
                                                                                p["groups"] != p["world_size"]):
            bad("groups", "does not fit position['world_size'] %d (%s)" % (
                p["world_size"], "data-parallel groups divide the ranks" if shards else "one group per rank"))
        if p["epoch"] == epochs and p["consumed"]:
            bad("consumed", "at the end of the run (epoch %d): the end has consumed 0" % epochs)
        dlio = self.settings.get("plan") == "dlio"  # its steps may read each file more than once
        if p["consumed"] > samples and not dlio:
            bad("consumed", "is out of range: more than the dataset's %d samples" % samples, "LADE_ERANGE")
        if p["base_groups"] and not shards:
            bad("base_groups", "is not 0: only plan shards saves the layout an epoch was resumed from")
        if bool(p["base_groups"]) != bool(p["base_batch"]) or (not p["base_groups"] and p["base_consumed"]) or \
                p["base_consumed"] > samples:
            bad("base_consumed", "does not fit position['base_groups'] %d and position['base_batch'] %d"
                % (p["base_groups"], p["base_batch"]))
        # the outer (epoch, step) is the saver's tell(): it must be the position's
        if epoch != p["epoch"]:
            raise Error("load_state_dict: the state's epoch %d and its position['epoch'] %d disagree (an edited or "
                        "merged state?); %s" % (epoch, p["epoch"], self._STATE_HELP))
        g = p["batch_size"] * (1 if shards else p["world_size"])
        if p["epoch"] == epochs:
            most = 0
        elif dlio:
            most = 2 ** 64
        else:  # the saver's steps of an epoch: at most ceil(samples / batch), at one rank
            most = (samples + p["batch_size"] - 1) // p["batch_size"]
        # regular and planned kinds: consumed is step x the global batch, give or take the rounding of an epoch
        # resumed at another layout (fewer than 2 global batches each way, plus DistributedSampler's padding)
        off = not shards and p["epoch"] < epochs and abs(p["consumed"] - step * g) >= 4 * g
        if step > most or off:
            at = ("0 (the end)" if p["epoch"] == epochs else "0 to %d" % most if shards
                  else "%d or near it" % (p["consumed"] // g))
            raise Error("load_state_dict: the state's step %d and its position disagree: position['consumed'] %d "
                        "at %d ranks x batch %d is step %s of epoch %d (an edited or merged state?)"
                        % (step, p["consumed"], p["world_size"], p["batch_size"], at, p["epoch"]))
        return tuple(p[k] for k in self._POSITION)

    def _position_of(self, state, version, epoch, step):
        """The saved global position as a tuple for _lade.Loader, or None when
        a seek of this loader to (epoch, step) is the same thing."""
        here = self._h.position()
        mine = dict(zip(self._POSITION, here))
        if version >= 2:
            pos = self._saved_position(state["position"], epoch, step)
        else:
            # version 1: (epoch, step) at the saver's world size and batch size
            s = state.get("settings", {})
            try:
                world = int(s.get("world_size") or mine["world_size"])
                batch = int(s.get("batch_size") or mine["batch_size"])
            except ValueError:
                raise Error("load_state_dict: the state's world_size/batch_size are not integers: %r, %r"
                            % (s.get("world_size"), s.get("batch_size"))) from None
            if (world, batch) == (mine["world_size"], mine["batch_size"]):
                return None
            if self.settings.get("plan") == "solar":
                raise Error("load_state_dict: a version 1 state of plan solar holds no shuffle epoch (solar's "
                            "epoch order depends on the world size): resume it at world_size %d and batch_size %d"
                            % (world, batch))
            shards = self.settings.get("plan") == "shards"
            groups = world // max(1, int(self.settings.get("model_parallel") or 1)) if shards else world
            consumed = step * batch if shards else step * batch * world
            pos = (epoch, consumed, epoch, world, batch, groups) + tuple(here[6:9]) + (0, 0, 0)
        p = dict(zip(self._POSITION, pos))
        for k, name in (("kind", "plan"), ("samples", "dataset size (samples)"), ("seed", "seed")):
            if p[k] != mine[k]:  # refused before this loader is closed (the C library checks it too)
                raise Error("load_state_dict: the state was saved with another %s (%r; this loader: %r): only "
                            "world_size, rank and batch_size may change on resume" % (name, p[k], mine[k]))
        same = (p["world_size"], p["batch_size"], p["groups"]) == (mine["world_size"], mine["batch_size"],
                                                                   mine["groups"])
        aligned = p["consumed"] == step * p["batch_size"] * (1 if self.settings.get("plan") == "shards"
                                                             else p["world_size"])
        # a planned kind with a disk cache restarts warm: from the position, with what survived on disk
        warm = self.settings.get("cache_dir") and self.settings.get("plan", "regular") not in ("regular", "shards")
        if same and not p["base_groups"] and aligned and p["epoch"] == epoch and not warm:
            return None  # the same layout: a seek, bit for bit (a planned kind replays its plan)
        return pos

    def load_state_dict(self, state):
        """Continues where the loader(s) that made `state` (state_dict()) stood.
        The state is global: any rank's (rank 0's) resumes every rank. At
        another world size or batch size the rest of the interrupted epoch is
        re-striped over this loader's ranks (every remaining sample exactly
        once, none of the consumed ones again) and later epochs are those of
        an uninterrupted run with this loader's settings (docs/plan.md
        "Resume"); a planned kind plans from there with empty caches. Then the
        loader is opened again at that position (what it prepared is
        dropped; under MPI every rank must call this together). Anything that
        is not such a state (not a dict, a key missing, a value that is no
        integer or out of its field's or this loader's range, a position that
        contradicts the state's epoch and step, a setting of _CHECKED that
        differs) raises lade.Error saying what, and changes nothing: a
        position the library refuses once the loader is closed reopens it
        where it stood. Refused while another thread iterates the loader."""
        self._h.owned("load_state_dict")
        if not isinstance(state, _abc.Mapping):
            raise Error("load_state_dict: got %s, not a dict; %s" % (type(state).__name__, self._STATE_HELP))
        missing = [k for k in ("epoch", "step") if k not in state]
        if missing:
            raise Error("load_state_dict: the state has no %s (its keys: %s); %s"
                        % (" and no ".join(repr(k) for k in missing), sorted(map(str, state)), self._STATE_HELP))
        version = self._state_int(state, "version") if "version" in state else 1
        if version not in (1, 2) or (version == 2 and "position" not in state):
            raise Error("unsupported lade state_dict version %r (this lade reads versions 1 and 2, and version 2 "
                        "has a 'position')" % (state["version"],))
        saved = state.get("settings", {})
        if not isinstance(saved, _abc.Mapping):
            raise Error("load_state_dict: 'settings' is %s, not a dict; %s" % (type(saved).__name__,
                                                                                self._STATE_HELP))
        for k in self._CHECKED:
            if k in saved and saved[k] != self.settings.get(k, ""):
                raise Error("load_state_dict: setting '%s' differs (saved %r, this loader %r); only world_size, "
                            "rank and batch_size may change on resume" % (k, saved[k], self.settings.get(k, "")))
        epoch, step = self._state_int(state, "epoch"), self._state_int(state, "step")
        if version >= 2:  # the outer (epoch, step) as written: checked against the position, never wrapped
            for k, v in (("epoch", epoch), ("step", step)):
                if not 0 <= v < 2 ** 64:
                    raise _error("LADE_ERANGE", "load_state_dict: the state's %s %d is out of range: 0 to %d"
                                 % (k, v, 2 ** 64 - 1))
        pos = self._position_of(state, version, epoch, step)
        if pos is None:
            self._h.seek(epoch, step, "load_state_dict")
        else:
            # opened again at the position: the cursor re-stripes, a planned kind plans from there
            self._reopen(pos)
        self._resume = True

    def _reopen(self, pos):
        """Closes the handle and opens one at `pos`; when the library refuses
        `pos`, opens one where this loader stood (its own start, then the
        position it was at) and raises the refusal."""
        where = self._h.tell()
        self._h.close()
        try:
            self._h = _lade.Loader(self._pairs, pos)
        except Error as refused:
            try:
                h = _lade.Loader(self._pairs, self._start_pos)
                h.seek(where[0], where[1], "load_state_dict")
            except Error as again:
                raise Error("load_state_dict: %s; and opening the loader again where it stood (epoch %d, step %d) "
                            "failed: %s; the loader is closed" % (refused, where[0], where[1], again)) from refused
            self._h = h
            raise
        self._start_pos = pos

    # ---- misc
    def stats(self):
        return self._h.stats()

    def epoch_stats(self, epoch):
        """Per-epoch metrics (DELI's): miss_rate, wait_seconds, get_requests,
        list_requests, remote_bytes, samples/bytes_by_source (storage, memory,
        disk, peer). Raises for an epoch that has not started."""
        return self._h.epoch_stats(epoch)

    @property
    def interrupted(self):
        """True when lade stopped the last next() (Ctrl-C, or interrupt()
        while it waited) and has handed out nothing since: the next iter()
        continues that epoch instead of starting it again."""
        return self._h.interrupted

    def interrupt(self):
        """Wakes the next() (the for loop's wait for a batch) that waits now,
        from any thread: it raises lade.Error (name "LADE_EINTR") and takes no
        batch, and the next iter()/stream() goes on from that batch. Returns
        True if one was waiting; False if none was, and then does nothing (it
        is never held over to a later next())."""
        return self._h.interrupt()

    def close(self):
        """Stops the workers and releases the files, the disk cache (and its
        cache_dir lock) and the transport. Tensors already handed out stay
        valid: they keep only their buffers."""
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
