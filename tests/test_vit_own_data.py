"""A checkpoint's own data: the shapes dataset, its test split found again through WVIZ_DATA (wviz.vit.demo) or
uploaded as a .zip (wviz.io.read_test_zip, hostile zips refused), its OOD sets (wviz.vit.data) and the dataset
panel's evaluation on it (wviz.vit.panel), against counts and searches done by hand."""
import io
import os
import struct
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from wviz import io as wio
from wviz.vit import data, demo, panel, shapes
from wviz.vit.model import ViTConfig, build_model
from tests.zips import zipped

NAMES = list(shapes.CLASSES)


def png(array: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG", **save)
    return buf.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return shapes.write_folder(tmp_path_factory.mktemp("data") / "shapes", train=4, test=3)


def tiny(n_classes=3, kind="stochastic", size=32, channels=3):
    torch.manual_seed(0)
    return build_model(ViTConfig(kind=kind, image_size=size, patch_size=8, channels=channels, n_classes=n_classes,
                                 dim=8, depth=1, heads=2))


def loaded(record, **config):
    return demo.Loaded("uploaded (stochastic)", tiny(**config), record, "upload:tiny")


SHAPES_RECORD = {"data": "folder", "data_folder": "shapes", "class_names": NAMES, "channels": 3, "image_size": 32}


# ---- the shapes dataset -----------------------------------------------------------------------------------------

def test_shapes_folder_has_the_folder_layout_and_draws_distinct_splits(folder):
    for split, n in (("train", 4), ("test", 3)):
        assert sorted(p.name for p in (folder / split).iterdir()) == NAMES
        for c in NAMES:
            files = sorted((folder / split / c).glob("*.png"))
            assert len(files) == n
            with Image.open(files[0]) as im:
                assert (im.format, im.mode, im.size) == ("PNG", "RGB", (32, 32))
    x, y, names = data.load_folder(folder, "test")
    assert x.shape == (9, 3, 32, 32) and y.tolist() == [0] * 3 + [1] * 3 + [2] * 3 and names == NAMES
    xt, _, _ = data.load_folder(folder, "train")
    assert not any(torch.equal(a, b) for a in x for b in xt)               # test pictures are not training ones
    images, labels = shapes.shape_images(3, seed=1)                          # the test split's seed
    torch.testing.assert_close(x, torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255)
    # each picture: one bright colour over a dark ground; the circle fills about pi r^2 of its bounding box's (2r)^2
    for image, k in zip(images, labels):
        bright = image.min(-1) >= 120
        rows, cols = np.nonzero(bright)
        box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
        fill = bright.sum() / box
        assert {0: 0.7 < fill < 0.85, 1: fill > 0.95, 2: 0.4 < fill < 0.6}[int(k)], (shapes.CLASSES[k], fill)


def test_the_shapes_command_and_its_test_zip(tmp_path):
    root = shapes.main([str(tmp_path / "s"), "--train", "1", "--test", "2"])
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*.png"))
    assert len(names) == 9 and names[0] == "test/circle/circle_000.png"
    with zipfile.ZipFile(io.BytesIO(shapes.test_zip(per_class=2))) as z:
        assert sorted(z.namelist()) == [n for n in names if n.startswith("test/")]
        assert all(z.read(n) == (root / n).read_bytes() for n in z.namelist())   # the same pictures
    with pytest.raises(SystemExit):
        shapes.main([str(tmp_path / "t"), "--test", "0"])


# ---- the folder layout, the OOD sets ----------------------------------------------------------------------------

def test_folder_errors_name_the_layout_and_the_labels_follow_the_models_classes(tmp_path, folder):
    flat = tmp_path / "flat"
    for c in ("cat", "dog"):
        (flat / c).mkdir(parents=True)
        (flat / c / "a.png").write_bytes(png(np.zeros((8, 8), np.uint8)))
    with pytest.raises(ValueError, match=r"flat holds class folders \(cat, dog\) directly, but a 'folder' dataset "
                                         r"has .*flat/train/<class>/ and .*flat/test/<class>/"):
        data.load_dataset("folder", "train", flat)
    with pytest.raises(ValueError, match="no folder .*nowhere: a 'folder' dataset has"):
        data.class_names("folder", tmp_path / "nowhere")
    x, y, names = data.load_folder(folder, "test", names=["zebra", *NAMES])   # labels index the model's names
    assert y.tolist() == [1] * 3 + [2] * 3 + [3] * 3 and names[0] == "zebra"
    with pytest.raises(ValueError, match="class folders the model does not know: triangle"):
        data.load_folder(folder, "test", names=["circle", "square"])
    (flat / "train" / "cat").mkdir(parents=True)
    (flat / "train" / "cat" / "bad.png").write_bytes(b"not a picture")
    (flat / "train" / "dog").mkdir()
    with pytest.raises(ValueError, match=r"bad.png: the file is not an image"):
        data.load_folder(flat, "train")


def test_mixed_halves_join_two_test_images_of_different_classes(folder):
    """The near-OOD set of a split: every image's left half is the left half of a test image and its right half the
    right half of one of another class (found by exact search)."""
    x, y, _ = data.load_folder(folder, "test")
    mixed = data.mixed_halves(x, y, 40, seed=3)
    assert mixed.shape == (40, 3, 32, 32) and torch.equal(mixed, data.mixed_halves(x, y, 40, seed=3))
    flat_l, flat_r = x[..., :16].reshape(len(x), -1), x[..., 16:].reshape(len(x), -1)
    for im in mixed:
        left = (flat_l == im[..., :16].reshape(1, -1)).all(1).nonzero()[:, 0]
        right = (flat_r == im[..., 16:].reshape(1, -1)).all(1).nonzero()[:, 0]
        assert len(left) and len(right) and not set(y[left].tolist()) & set(y[right].tolist())
    one_big = torch.tensor([0] * 50 + [1])  # 100 rounds cannot find the one partner: the fallback does
    halves = data.mixed_halves(torch.arange(51.0)[:, None, None, None].expand(51, 1, 2, 2), one_big, 20)
    assert bool(((halves[..., 0] == 50) ^ (halves[..., 1] == 50)).all())
    with pytest.raises(ValueError, match="two classes at least"):
        data.mixed_halves(x[:3], y[:3])


def test_the_ood_sets_of_a_split_are_shaped_like_it(folder):
    x, y, _ = data.load_folder(folder, "test")
    sets = data.ood_sets(x, y)
    assert list(sets) == list(data.OWN_OOD_SETS) and all(v.shape == x.shape for v in sets.values())
    torch.testing.assert_close(sets["mixed test images"], data.mixed_halves(x, y, len(x)))
    # the RGB crops are the grey crops' colours: same places, the grey one their channel mean (resizing is linear)
    rgb = data.ood_set("sample-image crops", 6, 32, channels=3)
    grey = data.ood_set("sample-image crops", 6, 32, channels=1)
    torch.testing.assert_close(rgb.mean(1, keepdim=True), grey, atol=1e-5, rtol=0)
    assert float((rgb[:, 0] - rgb[:, 2]).abs().mean()) > 0.01                   # and they are in colour


# ---- every picture checked --------------------------------------------------------------------------------------

def test_pictures_are_checked_for_format_mode_and_size(monkeypatch):
    rgb = np.zeros((40, 40, 3), np.uint8)
    assert data.image_from_bytes(png(rgb), 3, 8).shape == (3, 8, 8)
    gif = io.BytesIO()
    Image.fromarray(rgb).save(gif, "GIF")
    with pytest.raises(ValueError, match="a GIF file, not a PNG, JPEG or BMP picture"):
        data.image_from_bytes(gif.getvalue(), 3, 8)
    deep = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint16) + 300).save(deep, "PNG")  # 16-bit grey: would clip to white
    with pytest.raises(ValueError, match="of mode I;16 .*save it as an 8-bit"):
        data.image_from_bytes(deep.getvalue(), 1, 8)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # PIL's decompression-bomb limit, lowered: PIL warns
    with pytest.warns(Image.DecompressionBombWarning), pytest.raises(
            ValueError, match=r"40 x 40: too large \(at most 0.001 megapixels; refused as a possible decompression"):
        data.image_from_bytes(png(rgb), 3, 8)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)   # past twice the limit PIL refuses it itself
    with pytest.raises(ValueError, match="not an image PIL can read"):
        data.image_from_bytes(png(rgb), 3, 8)
    with pytest.raises(ValueError, match="reads 4 channels"):
        data.image_from_bytes(png(rgb), 4, 8)


# ---- a test split as a .zip -------------------------------------------------------------------------------------

def test_a_zip_of_the_test_split_reads_as_the_folder_does(folder, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    members = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("test/*/*.png"))}
    x, y, _ = data.load_folder(folder, "test")
    got = wio.read_test_zip(zipped(members), 3, 32, NAMES)
    torch.testing.assert_close(got.images, x, rtol=0, atol=0)
    assert got.labels.tolist() == y.tolist() and got.class_names == NAMES
    # inside a top folder, with macOS's extras and a note beside the images: the same images
    extra = {f"shapes/{k}": v for k, v in members.items()} | {"__MACOSX/shapes/._x.png": b"junk",
                                                                "shapes/test/.DS_Store": b"junk",
                                                                "shapes/README.txt": b"hello"}
    assert torch.equal(wio.read_test_zip(zipped(extra), 3, 32, NAMES).images, x)
    # some classes only: the labels still index the model's classes; no names: the zip's folders, sorted
    two = {k: v for k, v in members.items() if "circle" not in k}
    assert wio.read_test_zip(zipped(two), 3, 32, NAMES).labels.tolist() == [1] * 3 + [2] * 3
    assert wio.read_test_zip(zipped(two), 1, 16, None, 2).class_names == ["square", "triangle"]
    assert list(tmp_path.iterdir()) == []                                      # nothing written to disk


HOSTILE = [
    ({"../evil.png": b"x", "test/a/1.png": b"x"}, (), r"'../evil.png' leads outside the zip's folder"),
    ({"test/../../evil.png": b"x"}, (), r"leads outside the zip's folder"),
    ({"/etc/evil.png": b"x"}, (), r"'/etc/evil.png' is an absolute path"),
    ({"C:/evil.png": b"x"}, (), r"is an absolute path"),
    ({"test\\a\\1.png": b"x"}, (), r"leads outside the zip's folder \('..', backslashes\)"),
    ({"test/a/link.png": b"/etc/passwd"}, ("test/a/link.png",), r"'test/a/link.png' is a symbolic link"),
    ({"test/a/1.png": bytes(2 * 2 ** 20)}, (), r"unpacks to \d+ times its packed size: refused as a zip bomb"),
    ({"notes.txt": b"hello"}, (), r"it holds 0 images in 0 class folder\(s\) under test/"),
    ({"test/circle/1.png": b"not a picture", "test/square/2.png": b"x"}, (),
     r"test/circle/1.png: the file is not an image PIL can read"),
    ({"test/circle/a.png": None, "test/horse/b.png": None}, (),
     r"class folder 'horse' is not one of the model's classes \(circle, square, triangle\)"),
]


@pytest.mark.parametrize("members, links, message", HOSTILE, ids=[m for _, _, m in HOSTILE])
def test_hostile_zips_are_refused_with_their_message(members, links, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    picture = png(np.zeros((8, 8, 3), np.uint8))
    members = {k: picture if v is None else v for k, v in members.items()}
    with pytest.raises(ValueError, match=message) as err:
        wio.read_test_zip(zipped(members, links), 3, 32, NAMES)
    assert str(err.value).startswith("The test-images zip has")
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "evil.png").exists()


def test_zips_over_the_cap_not_zips_and_lying_headers_are_refused(monkeypatch):
    picture = png(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    good = zipped({"test/circle/a.png": picture, "test/square/b.png": picture})
    assert len(wio.read_test_zip(good, 3, 32, NAMES).labels) == 2
    with pytest.raises(ValueError, match="it is not a .zip file"):
        wio.read_test_zip(b"PK but not really", 3, 32, NAMES)
    monkeypatch.setenv("WVIZ_MAX_TEST_ZIP_MB", str(len(good) / 2 ** 20 / 2))
    with pytest.raises(ValueError, match=r"it is 0.0 MB, over the limit .*WVIZ_MAX_TEST_ZIP_MB sets it"):
        wio.read_test_zip(good, 3, 32, NAMES)
    monkeypatch.setenv("WVIZ_MAX_TEST_ZIP_MB", str(len(good) / 2 ** 20 * 1.5))   # the upload fits, its contents not
    bomb = zipped({"test/circle/a.png": picture, "test/square/b.png": picture, "test/square/c.bmp": bytes(60_000)})
    with pytest.raises(ValueError, match=r"its contents unpack to 0.1 MB, over the limit"):
        wio.read_test_zip(bomb, 3, 32, NAMES)
    monkeypatch.setenv("WVIZ_MAX_TEST_ZIP_MB", "lots")
    with pytest.raises(ValueError, match="WVIZ_MAX_TEST_ZIP_MB must be a number"):
        wio.read_test_zip(good, 3, 32, NAMES)
    monkeypatch.delenv("WVIZ_MAX_TEST_ZIP_MB")
    # a member whose headers claim fewer bytes than it holds: read up to the claim, refused by its checksum
    lying = bytearray(good)
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = lying.index(sig)
        lying[at + offset:at + offset + 4] = struct.pack("<I", 100)
    with pytest.raises(ValueError, match=r"test/circle/a.png: (Bad CRC-32|it unpacks to more or fewer bytes)"):
        wio.read_test_zip(bytes(lying), 3, 32, NAMES)


# ---- where a model's data is ------------------------------------------------------------------------------------

def test_wviz_data_finds_a_folder_by_its_name_and_cifar_by_its_official_folder(folder, tmp_path, monkeypatch):
    parent = folder.parent
    assert demo.data_paths(f"{tmp_path}{os.pathsep}{os.pathsep}~/x") == [tmp_path, demo.Path("~/x").expanduser()]
    assert demo.find_root("folder", "shapes", [tmp_path, parent]) == folder      # a folder that holds it
    assert demo.find_root("folder", "shapes", [folder]) == folder                # or the root itself
    assert demo.find_root("folder", "other", [parent]) is None
    assert demo.find_root("folder", "..", [folder / "test"]) is None             # never a path out of a folder
    (tmp_path / "cifar-10-batches-py").mkdir()
    assert demo.find_root("cifar10", None, [parent, tmp_path]) == tmp_path
    assert demo.find_root("cifar10", None, [tmp_path / "cifar-10-batches-py"]) == tmp_path
    assert demo.find_root("cifar100", None, [tmp_path]) is None

    monkeypatch.setenv("WVIZ_DATA", f"{tmp_path}{os.pathsep}{parent}")
    place = demo.data_place(loaded(SHAPES_RECORD))
    assert (place.kind, place.root, place.missing) == ("folder", folder, False)
    assert place.note == f"Test split: 'shapes' found through WVIZ_DATA at {folder}."
    split = demo.disk_split(loaded(SHAPES_RECORD), place)
    assert len(split) == 9 and split.class_names == NAMES and not split.dataset and split.noun == "test images"
    monkeypatch.setattr(demo, "MAX_SPLIT", 4)
    smaller = demo.disk_split(loaded(SHAPES_RECORD), place)
    assert len(smaller) == 4 and all(any(torch.equal(a, b) for b in split.images) for a in smaller.images)

    monkeypatch.setenv("WVIZ_DATA", str(tmp_path))
    for record, start in ((SHAPES_RECORD, "This checkpoint was trained on the folder 'shapes'"),
                          ({"data": "cifar100"}, "This checkpoint was trained on CIFAR-100"),
                          ({}, "This checkpoint's record does not say where its data is")):
        note = demo.data_place(loaded(record)).note
        assert note.startswith(start) and note.endswith(".") and ". " not in note, note   # one sentence
        assert ".zip of" in note and ("WVIZ_DATA" in note) == bool(record)
    assert f"(now WVIZ_DATA={tmp_path})" in demo.data_place(loaded(SHAPES_RECORD)).note
    digits = demo.Loaded("d", tiny(10, size=16, channels=1), {"data": "digits"}, "upload:d")
    assert demo.data_place(digits).kind == "digits" and not demo.data_place(digits).missing


# ---- the dataset panel on a model's own test split ----------------------------------------------------------------

def test_the_panel_on_a_folder_split_counts_the_confusion_by_hand(folder, monkeypatch, tmp_path):
    """A model trained for 20 steps on the shapes (its predictions spread over classes), evaluated on the zip of
    the test split: the confusion matrix equals the pairs (true, predicted) counted one by one."""
    from wviz.vit.train import train_steps

    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    model = loaded({**SHAPES_RECORD, "eval_samples": 2})
    x, y, _ = data.load_folder(folder, "train")
    train_steps(model.model, x, y, steps=20, lr=1e-2, batch=8)
    model.model.eval()
    split = demo.zip_split(model, shapes.test_zip(per_class=3), "shapes.zip")
    assert split.source == "your upload 'shapes.zip'" and split.ood_names == data.OWN_OOD_SETS
    (job,) = panel.panel_jobs(demo.Models({model.name: model}, model), split)
    assert job.cache_key[-1] == split.digest and not job.from_record
    report = panel.evaluate_panel(job)
    assert list(report.ood) == list(data.OWN_OOD_SETS)
    from wviz.vit.evaluate import predict

    probs = predict(model.model, split.images, samples=2).probs.numpy()
    counts = np.zeros((3, 3), dtype=int)
    for truth, guess in zip(split.labels.tolist(), probs.argmax(1).tolist()):
        counts[truth, guess] += 1
    assert (counts.sum(0) > 0).sum() >= 2                                    # the premise: not one column
    np.testing.assert_array_equal(report.confusion.numpy(), counts)
    assert abs(report.accuracy - np.trace(counts) / 9) < 1e-6 and counts.sum(1).tolist() == [3, 3, 3]
    # the near set the panel scored is the split's own halves: its max-softmax scores are the model's on them
    mixed = data.mixed_halves(split.images, split.labels)
    want = 1 - predict(model.model, mixed, samples=2).probs.max(-1).values
    torch.testing.assert_close(report.ood["mixed test images"]["max-softmax"][1], want)


def test_the_readmes_train_your_own_commands_run(tmp_path, monkeypatch):
    """The commands of the README's "Train your own" (and docs/TRAINING.md's) are the ones this code takes: the shapes
    command makes the folder, the training command's options parse and name that folder."""
    import shlex
    from pathlib import Path

    from wviz.vit import train

    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text()
    section = text[text.index("## Train your own"):]
    section = section[:section.index("\n## ", 10)]
    commands = [shlex.split(line.split("#")[0]) for line in section.splitlines()
                if line.strip().startswith("python -m wviz.vit.")]
    assert [c[2] for c in commands] == ["wviz.vit.shapes", "wviz.vit.train"]
    for doc in (text, (root / "docs/TRAINING.md").read_text()):
        assert " ".join(commands[1]) in doc                         # the same command in both documents
    monkeypatch.chdir(tmp_path)
    shapes.main(commands[0][3:] + ["--train", "1", "--test", "1"])
    args = train.parse_args(commands[1][3:])
    assert (args.data, args.data_root) == ("folder", "shapes") and (tmp_path / args.data_root / "test").is_dir()
    assert "WVIZ_DATA=$PWD make run" in section
