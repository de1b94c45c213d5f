"""A saved state cannot lie (issue 29): load_state_dict() checks every field of a state as the user wrote
it, before anything is closed; a state it refuses leaves the loader as it stood; one it accepts resumes
with every sample the saver had not consumed exactly once. Rank layouts run in one process (rank r of P,
transport=local), as tests/python/test_resize.py does."""
import collections
import random
import threading

import numpy as np
import pytest

import lade

N, B, E, SEED = 300, 8, 3, 11


def _loader(npy_dir, rank=0, world=1, batch=B, epochs=E, plan="regular", **kw):
    kw.setdefault("threads", 2)
    return lade.Loader(npy_dir, transform="npy", batch_size=batch, epochs=epochs, seed=SEED, rank=rank,
                       world_size=world, plan=plan, transport="local", output="numpy", meta=True, **kw)


def _state(npy_dir, P=4, batch=B, steps=5, epoch=0):
    """Rank 0's state after `steps` steps of `epoch` at P ranks (P x batch x steps consumed)."""
    with _loader(npy_dir, 0, P, batch) as L:
        L.set_epoch(epoch)
        it = iter(L)
        for _ in range(steps):
            next(it)
        del it
        return L.state_dict()


@pytest.fixture(scope="module")
def perm(npy_dir):
    """Each epoch's order (a permutation of the dataset): what one rank of batch 1 delivers."""
    out = []
    with _loader(npy_dir, 0, 1, 1) as L:
        for _ in range(E):
            out.append([int(m.indices[0]) for _x, _y, m in L])
    return out


def _rest(npy_dir, state, Q=3, batch=5):
    """The valid samples Q ranks deliver for the rest of the state's epoch, as a Counter."""
    got = collections.Counter()
    for r in range(Q):
        with _loader(npy_dir, r, Q, batch) as L:
            L.load_state_dict(state)
            e0 = L.tell()[0]
            if e0 >= E:
                assert L.next_batch() is None
                continue
            for _x, _y, m in L:
                assert m.epoch == e0
                got.update(int(i) for i in np.asarray(m.indices)[:m.valid])
    return got


def _first(L, n=3):
    """The next n batches' (epoch, step, indices), taken with next_batch()."""
    out = []
    for _ in range(n):
        b = L.next_batch()
        out.append(None if b is None else (b.epoch, b.step, [int(i) for i in np.asarray(b.indices)]))
    return out


# ---- finding 1: a position field is checked as given, never wrapped

@pytest.mark.parametrize("value", [2 ** 64, 2 ** 64 + 160, -8, 2 ** 63, -(2 ** 63)])
def test_consumed_is_checked_as_written(npy_dir, perm, value):
    st = _state(npy_dir)
    assert st["position"]["consumed"] == 160
    st["position"]["consumed"] = value
    with _loader(npy_dir, 0, 3, 5) as L:
        with pytest.raises(lade.Error) as e:
            L.load_state_dict(st)
        assert "position['consumed']" in str(e.value) and str(value) in str(e.value)
        wrapped = value % 2 ** 64
        assert wrapped == value or wrapped < 1000 or str(wrapped) not in str(e.value).replace(str(value), "")
        assert e.value.name == "LADE_ERANGE"
    # and the state as saved resumes the 140 samples the 4 ranks had not consumed, each once
    st["position"]["consumed"] = 160
    assert _rest(npy_dir, st) == collections.Counter(perm[0][160:])


@pytest.mark.parametrize("key,value", [("world_size", 2 ** 32), ("batch_size", 2 ** 32 + 8), ("groups", -4),
                                       ("base_groups", 2 ** 32), ("kind", 2 ** 31), ("samples", 2 ** 64 + 300),
                                       ("seed", 2 ** 64 + SEED), ("epoch", 2 ** 64), ("shuffle_epoch", -1),
                                       ("base_consumed", 2 ** 64)])
def test_every_field_is_checked_as_written(npy_dir, key, value):
    st = _state(npy_dir)
    st["position"][key] = value
    with _loader(npy_dir, 0, 3, 5) as L:
        L.seek(1, 2)
        with pytest.raises(lade.Error) as e:
            L.load_state_dict(st)
        assert "position['%s']" % key in str(e.value) and str(value) in str(e.value)
        assert L.tell() == (1, 2)


# ---- finding 2: an epoch past the end, and an outer (epoch, step) that contradicts the position

def test_position_epoch_past_the_end_refused(npy_dir):
    st = _state(npy_dir)
    st["epoch"] = st["position"]["epoch"] = st["position"]["shuffle_epoch"] = 2 ** 40
    with _loader(npy_dir, 0, 3, 5) as L:
        with pytest.raises(lade.Error, match=r"position\['epoch'\] 1099511627776 is out of range: epochs are 0 to "
                                             r"2 on this loader \(3 epochs") as e:
            L.load_state_dict(st)
        assert e.value.name == "LADE_ERANGE"
        assert L.tell() == (0, 0) and L.next_batch() is not None


def test_outer_epoch_contradicting_the_position_refused(npy_dir):
    st = _state(npy_dir)
    st["position"]["epoch"] = st["position"]["shuffle_epoch"] = 2  # would skip two epochs
    with _loader(npy_dir, 0, 3, 5) as L:
        with pytest.raises(lade.Error, match=r"the state's epoch 0 and its position\['epoch'\] 2 disagree"):
            L.load_state_dict(st)
        assert L.tell() == (0, 0)


@pytest.mark.parametrize("epoch,step", [(-1, 5), (0, 10 ** 6), (0, -1), (0, 0), (0, 20), (2 ** 64, 5)])
def test_outer_epoch_and_step_checked(npy_dir, epoch, step):
    st = _state(npy_dir)  # epoch 0, step 5, 160 consumed at 4 x 8
    st["epoch"], st["step"] = epoch, step
    with _loader(npy_dir, 0, 3, 5) as L:
        L.seek(2, 3)
        with pytest.raises(lade.Error) as e:
            L.load_state_dict(st)
        msg = str(e.value)
        assert msg.startswith("load_state_dict: ") and ("%d" % (epoch if epoch != 0 else step)) in msg
        assert L.tell() == (2, 3)


def test_the_end_resumes_as_the_end(npy_dir):
    with _loader(npy_dir, 0, 4) as L:
        for e in range(E):
            for _ in L:
                pass
        st = L.state_dict()
    assert (st["epoch"], st["step"], st["position"]["epoch"], st["position"]["consumed"]) == (E, 0, E, 0)
    with _loader(npy_dir, 0, 3, 5) as L:
        L.load_state_dict(st)
        assert L.tell() == (E, 0) and L.next_batch() is None
    st["position"]["consumed"] = 8
    with _loader(npy_dir, 0, 3, 5) as L:
        with pytest.raises(lade.Error, match=r"position\['consumed'\] 8 .*the end"):
            L.load_state_dict(st)
        assert L.tell() == (0, 0)


# ---- finding 3: a refused position leaves the loader as it stood

def _refused_cases(npy_dir):
    st = _state(npy_dir)
    out = []
    for key, value in (("consumed", N + 1), ("consumed", -8), ("world_size", 0), ("batch_size", 0), ("groups", 0),
                       ("groups", 5)):
        s = {**st, "position": dict(st["position"], **{key: value})}
        out.append(("%s=%d" % (key, value), s))
    return out


def test_refused_position_leaves_the_loader_open(npy_dir):
    for name, st in _refused_cases(npy_dir):
        with _loader(npy_dir, 1, 3, 5) as L:
            L.seek(1, 4)
            want = _first(L, 2)
            L.seek(1, 4)
            with pytest.raises(lade.Error):
                L.load_state_dict(st)
            assert not L.closed, name
            assert L.tell() == (1, 4), name
            assert _first(L, 2) == want, name


def test_refused_by_the_library_after_close_reopens_as_before(npy_dir, tmp_path):
    """A position only the C library can judge (plan=shards, consumed not whole batches at the same
    layout): the loader is reopened where it stood, the library's reason raised."""
    import io
    import tarfile
    d = tmp_path / "shards"
    d.mkdir()
    for s in range(4):
        with tarfile.open(d / ("train-%03d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
            for j in range(20):
                data = bytes([(s * 20 + j) % 251]) * 16
                ti = tarfile.TarInfo("s%d_%02d.bin" % (s, j))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))

    def mk(rank):
        return lade.Loader(str(d), transform="raw", batch_size=4, epochs=2, seed=1, rank=rank, world_size=2,
                           plan="shards", transport="local", output="numpy", meta=True, threads=1)
    with mk(0) as L:
        it = iter(L)
        next(it)
        next(it)
        del it
        st = L.state_dict()
    assert st["position"]["consumed"] == 8
    st["position"]["consumed"] = 6
    with mk(0) as L:
        L.seek(1, 2)
        want = _first(L, 2)
        L.seek(1, 2)
        with pytest.raises(lade.Error, match="not whole batches of 4"):
            L.load_state_dict(st)
        assert not L.closed and L.tell() == (1, 2) and _first(L, 2) == want
        L.seek(0, 0)
        assert _first(L, 1)[0][:2] == (0, 0)


# ---- finding 6: load_state_dict from another thread while one iterates

def test_load_state_dict_from_another_thread_refused(npy_dir):
    st = _state(npy_dir)
    with _loader(npy_dir, 0, 1, 5) as L:
        it = iter(L)
        next(it)
        errors = []

        def other():
            try:
                L.load_state_dict(st)
            except lade.Error as e:
                errors.append(e)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1 and "in use by another thread" in str(errors[0])
        x, y, m = next(it)  # the iterating thread goes on
        assert (m.epoch, m.step) == (0, 1)
        for _ in it:
            pass
        del it
        # no iteration in flight: another thread may load a state
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1 and L.tell() == (0, 32)


# ---- the property test: every field of a version 2 state, random values, types, missing and extra keys

_U64 = ("epoch", "consumed", "shuffle_epoch", "samples", "seed", "base_consumed")
_WEIRD = ["7", 7.0, None, True, [1], {"a": 1}, b"\x01", 1j]


def _mutations(rng, st):
    pos = st["position"]
    for _ in range(70):
        s = {**st, "position": dict(pos)}
        what = rng.randrange(10)
        key = rng.choice(sorted(pos) + ["epoch", "step"])
        target = s if key in ("epoch", "step") and rng.random() < 0.5 else s["position"]
        if what == 0:
            v = rng.choice(_WEIRD)
        elif what == 1:
            v = rng.choice([2 ** 64, 2 ** 63, 2 ** 32, 2 ** 31, 2 ** 64 - 1, 2 ** 32 - 1, -1, -(2 ** 63), -(2 ** 64)])
        elif what == 2:
            v = target.get(key, 0) + rng.choice([-2, -1, 1, 2, 8, 40, -40])
        elif what == 3:
            v = rng.randrange(0, 400)
        elif what == 4:
            v = rng.choice([np.int64(target.get(key, 0)), np.uint32(max(0, target.get(key, 0)) % 2 ** 32)])
        elif what == 5:
            target.pop(key, None)
            yield "no %s" % key, s
            continue
        elif what == 6:
            s["position"]["bogus_%d" % rng.randrange(9)] = 1
            yield "extra position key", s
            continue
        elif what == 7:  # another consistent layout: the saver at other ranks x batch at the same consumed
            w, b = rng.choice([(1, 160), (2, 16), (8, 4), (5, 8)])
            s["position"].update(world_size=w, batch_size=b, groups=w)
            s["step"] = 160 // (w * b)
            yield "layout %dx%d" % (w, b), s
            continue
        elif what == 8:  # another consumed count, with a step that agrees
            c = rng.randrange(0, N + 1)
            s["position"]["consumed"] = c
            s["step"] = c // 32
            yield "consumed %d step %d" % (c, c // 32), s
            continue
        else:
            s["extra_%d" % rng.randrange(9)] = "kept"  # a checkpoint's own keys beside lade's
            yield "extra top-level key", s
            continue
        target[key] = v
        yield "%s%s=%r" % ("" if target is s else "position.", key, v), s


def test_state_fields_fuzzed(npy_dir, perm):
    rng = random.Random(29)
    st = _state(npy_dir)  # 4 x 8 x 5 steps of epoch 0: 160 consumed
    refused = accepted = 0
    for name, s in _mutations(rng, st):
        with _loader(npy_dir, 2, 3, 5) as L:
            L.seek(1, 7)
            want = _first(L, 1)
            L.seek(1, 7)
            try:
                L.load_state_dict(s)
            except lade.Error as e:
                msg = str(e)
                assert msg.startswith("load_state_dict") or msg.startswith("unsupported lade state_dict"), (name, msg)
                assert not L.closed and L.tell() == (1, 7), name
                assert _first(L, 1) == want, name
                refused += 1
                continue
        # accepted: the rest of its epoch at 3 ranks is every sample the position had not consumed, once
        pos = s["position"]
        if isinstance(pos.get("epoch"), (int, np.integer)) and pos["epoch"] >= E:
            continue
        c, e0 = int(pos["consumed"]), int(pos["epoch"])
        assert _rest(npy_dir, s) == collections.Counter(perm[e0][c:]), name
        accepted += 1
    assert refused > 20 and accepted > 10, (refused, accepted)
