"""The dir source against torchvision's ImageFolder: the same files, in the same order,
with the same labels, classes and errors (docs/sources.md lists where lade differs)."""
import os

import pytest

import lade

try:
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, has_file_allowed_extension
except ImportError:  # pragma: no cover
    ImageFolder = None

pytestmark = pytest.mark.skipif(ImageFolder is None, reason="torchvision is not installed")


def make_tree(root, files=(), dirs=(), links=()):
    """files: relative paths (folders made as needed); links: (relative link, target)."""
    os.makedirs(root, exist_ok=True)
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for f in files:
        p = os.path.join(root, f)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(b"x")  # listing only: the bytes are never decoded here
    for link, target in links:
        p = os.path.join(root, link)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(target, p)
    return str(root)


def listing(root, transform="imagenet-eval"):
    with lade.Loader(root, transform=transform, batch_size=1, threads=1, output="numpy") as L:
        return L.classes, L.class_to_idx, L.samples, L.targets


def assert_same(root, ref):
    classes, class_to_idx, samples, targets = listing(root)
    assert samples == ref.samples
    assert targets == ref.targets
    assert classes == ref.classes
    assert class_to_idx == ref.class_to_idx


# Names whose byte order differs from a depth-first walk ("a/b" sorts after
# "a-b", "a.b", "a0"), mixed-case extensions, stray files, unicode (2-, 3- and
# 4-byte UTF-8), deep nesting, files at the root (ImageFolder ignores them).
TRICKY = [
    "k/a/b/x.jpg", "k/a/q.TIF", "k/a.b/y.PNG", "k/a-b/z.Jpeg", "k/a0/w.webp", "k/top.BMP", "k/a/b/c/d/e.ppm",
    "k/ab/m.pgm", "k/a b/s.tiff", "k/notes.txt", "k/README", "k/jpg", "k/x.jpg.txt", "k/a/b/stray.json",
    "m/é/1.jpg", "m/e/2.jpg", "m/z/3.jpg", "m/中/4.jpg", "m/😀/5.jpg", "m/Z/6.JPG", "m/_/7.jpeg", "m/é.jpg",
    "m/e.jpg", "m/😀.png", "m/ÿ.png",
    "n-1/a.jpg", "n.1/b.jpg", "n/c.jpg", "N/d.jpg", "é/e.jpg", "😀/f.jpg",
    "root.jpg", "root.txt",
]


def test_same_samples_as_imagefolder(tmp_path):
    root = make_tree(tmp_path / "ds", TRICKY)
    assert_same(root, ImageFolder(root))
    # the test tree is tricky: a depth-first sorted walk gives another order
    dfs = []
    for c in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, c)):
            for dp, dn, fn in os.walk(os.path.join(root, c)):
                dn.sort()
                dfs += [os.path.join(dp, f) for f in sorted(fn) if has_file_allowed_extension(f, IMG_EXTENSIONS)]
    assert dfs != [p for p, _ in ImageFolder(root).samples]


def test_root_path_spelling_and_trailing_slash(tmp_path):
    root = make_tree(tmp_path / "ds", ["a/x.jpg", "b/y/z.png"])
    assert_same(root + "/", ImageFolder(root + "/"))
    assert_same(root + "//", ImageFolder(root + "//"))
    rel = os.path.relpath(root)
    assert_same(rel, ImageFolder(rel))


def test_symlinked_folders_and_files(tmp_path):
    make_tree(tmp_path / "elsewhere", ["deep/s.jpg", "deep/t.png", "deep/in/s2.jpg", "u.jpg"])
    root = make_tree(tmp_path / "ds", ["a/f.jpg", "a/sub-x/k.jpg", "c/g.jpg"],
                     links=[("b", "../elsewhere"),                     # a class folder that is a link
                            ("a/sub", "../../elsewhere/deep"),         # a linked sub-folder
                            ("c/h.jpg", "../../elsewhere/u.jpg")])     # a linked file
    ref = ImageFolder(root)
    assert len(ref.samples) == 11
    # whole-path order through the link: "a/sub", then "a/sub-x", then "a/sub/in"
    assert [os.path.relpath(p, root) for p, _ in ref.samples[:5]] == [
        "a/f.jpg", "a/sub/s.jpg", "a/sub/t.png", "a/sub-x/k.jpg", "a/sub/in/s2.jpg"]
    assert_same(root, ref)


def test_hidden_entries_are_skipped(tmp_path):
    # ImageFolder makes '.ipynb_checkpoints' a class and keeps hidden files and
    # folders; lade skips every name starting with '.', as documented
    root = make_tree(tmp_path / "ds", ["a/x.jpg", "a/notes.txt", "a/.y.jpg", "a/.thumbs/t.jpg", "a/._x.jpg", "b/z.jpg",
                                       ".ipynb_checkpoints/c.jpg", ".git/objects/o.png"])

    class NoHidden(ImageFolder):
        def find_classes(self, directory):
            classes = [c for c in find_classes(directory)[0] if not c.startswith(".")]
            return classes, {c: i for i, c in enumerate(classes)}

    def visible_image(path):
        rel = os.path.relpath(path, root)
        return has_file_allowed_extension(path, IMG_EXTENSIONS) and not any(
            part.startswith(".") for part in rel.split(os.sep))

    ref = NoHidden(root, is_valid_file=visible_image)
    assert [os.path.relpath(p, root) for p, _ in ref.samples] == ["a/x.jpg", "b/z.jpg"]
    assert_same(root, ref)
    assert ImageFolder(root).classes[0] == ".git"  # the difference is real


def test_raw_keeps_every_regular_file(tmp_path):
    root = make_tree(tmp_path / "ds", TRICKY)
    ref = ImageFolder(root, is_valid_file=lambda p: True)
    classes, class_to_idx, samples, targets = listing(root, transform="raw")
    assert samples == ref.samples and classes == ref.classes
    assert (os.path.join(root, "k", "notes.txt"), class_to_idx["k"]) in samples


def test_flat_folder_is_unlabelled(tmp_path):
    root = make_tree(tmp_path / "flat", ["b.jpg", "a.PNG", "c.txt"])
    with pytest.raises(FileNotFoundError):
        ImageFolder(root)  # lade differs on purpose: an unlabelled dataset
    classes, class_to_idx, samples, targets = listing(root)
    assert classes == [] and class_to_idx == {}
    assert samples == [(os.path.join(root, "a.PNG"), -1), (os.path.join(root, "b.jpg"), -1)]
    assert targets == [-1, -1]
    _, _, samples, _ = listing(root, transform="raw")
    assert [os.path.basename(p) for p, _ in samples] == ["a.PNG", "b.jpg", "c.txt"]


def _lade_error(root, transform="imagenet-eval"):
    with pytest.raises(lade.Error) as e:
        with lade.Loader(root, transform=transform, batch_size=1, threads=1, output="numpy") as L:
            L.samples  # noqa: B018 (the listing's error surfaces at create, or here)
    return str(e.value)


def test_empty_class_folders_fail_naming_them(tmp_path):
    root = make_tree(tmp_path / "ds", ["a/x.jpg", "b/notes.txt", "d/.hidden.jpg"], dirs=["c"])
    with pytest.raises(FileNotFoundError, match=r"classes b, c\. "):
        ImageFolder(root)  # it takes d's hidden file; lade skips hidden files
    msg = _lade_error(root)
    assert root in msg and "class folders 'b', 'c', 'd' have no images" in msg and ".webp" in msg
    # with raw data only folders without any file fail
    msg = _lade_error(root, transform="raw")
    assert "class folders 'c', 'd' have no files" in msg


def test_no_images_fails_naming_the_root(tmp_path):
    root = make_tree(tmp_path / "ds", ["notes.txt", "README", ".x.jpg"])
    with pytest.raises(FileNotFoundError):
        ImageFolder(root)
    msg = _lade_error(root)
    assert "no images found under %s (extensions, any case: .jpg .jpeg .png" % root in msg
    empty = make_tree(tmp_path / "empty")
    assert "no files found under %s" % empty in _lade_error(empty, transform="raw")


def test_batch_labels_and_indices_map_to_imagefolder(jpeg_dir):
    ref = ImageFolder(jpeg_dir)
    with lade.Loader(jpeg_dir, transform="imagenet-eval", batch_size=8, threads=2, seed=3, output="numpy",
                     meta=True, crop_size=32, resize_size=36) as L:
        assert L.samples == ref.samples and L.classes == ref.classes
        seen = set()
        for _, labels, b in L:
            for i, lab in zip(b.indices.tolist(), labels.tolist()):
                assert lab == ref.targets[i]
                assert L.classes[lab] == os.path.basename(os.path.dirname(ref.samples[i][0]))
                seen.add(i)
        assert seen == set(range(len(ref.samples)))
