"""wviz.vit.data: the digits split, CIFAR's python format read without running code, folders, OOD sets,
corruptions."""
import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits, load_sample_images

from wviz.vit import data


def test_digits_split_is_fixed_disjoint_and_upsampled():
    x, y = data.load_dataset("digits", "train")
    xt, yt = data.load_dataset("digits", "test")
    assert x.shape == (1437, 1, 16, 16) and xt.shape == (360, 1, 16, 16)
    assert x.dtype == torch.float32 and y.dtype == torch.long and 0 <= x.min() and x.max() <= 1
    x2, _ = data.load_dataset("digits", "train")
    assert torch.equal(x, x2)
    # every image is one of sklearn's digits / 16, upsampled bilinearly (half-pixel centres, edges clamped)
    src = load_digits().images / 16
    pos = np.clip((np.arange(16) + 0.5) / 2 - 0.5, 0, 7)
    lo = np.floor(pos).astype(int)
    hi, w = np.minimum(lo + 1, 7), pos - np.floor(pos)
    rows = src[:, lo] * (1 - w)[None, :, None] + src[:, hi] * w[None, :, None]
    up = rows[:, :, lo] * (1 - w) + rows[:, :, hi] * w  # (1797, 16, 16)
    both = torch.cat([x, xt])[:, 0].reshape(1797, -1).double()
    d = torch.cdist(both, torch.tensor(up.reshape(1797, -1)))
    assert d.min(1).values.max() < 1e-5
    assert sorted(d.argmin(1).tolist()) == list(range(1797))  # each original exactly once
    assert torch.equal(torch.cat([y, yt]), torch.tensor(load_digits().target)[d.argmin(1)])
    assert set(map(bytes, (t.numpy().tobytes() for t in x[:50]))).isdisjoint(t.numpy().tobytes() for t in xt)


def test_the_sample_photographs_are_scikit_learns_read_without_importing_it():
    ours, theirs = data.sample_photographs(), load_sample_images()
    assert list(ours) == [f.rsplit("/", 1)[-1] for f in theirs.filenames] == ["china.jpg", "flower.jpg"]
    for mine, reference in zip(ours.values(), theirs.images, strict=True):
        assert mine.dtype == np.uint8 and np.array_equal(mine, reference)


def _cifar10(root, n=4):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n))}
        (folder / name).write_bytes(pickle.dumps(d))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"plane", b"car", b"bird", b"cat"]}))
    return folder


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('x')",)


def test_cifar_python_format_and_a_hostile_batch(tmp_path):
    folder = _cifar10(tmp_path)
    x, y = data.load_dataset("cifar10", "train", tmp_path)
    assert x.shape == (20, 3, 32, 32) and y.tolist() == list(range(4)) * 5
    raw = pickle.loads((folder / "data_batch_1").read_bytes())[b"data"]
    assert torch.allclose(x[0], torch.tensor(raw[0].reshape(3, 32, 32) / 255, dtype=torch.float32))
    assert data.class_names("cifar10", tmp_path) == ["plane", "car", "bird", "cat"]
    marker = tmp_path / "ran"
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil(marker), b"labels": [0]}))
    with pytest.raises(ValueError, match="refusing to load builtins.exec"):
        data.load_dataset("cifar10", "test", tmp_path)
    assert not marker.exists()
    with pytest.raises(ValueError, match="missing CIFAR file"):
        data.load_dataset("cifar100", "test", tmp_path)
    with pytest.raises(ValueError, match="give its root"):
        data.load_dataset("cifar10", "test")


def test_folder_dataset(tmp_path):
    for split in ("train", "test"):
        for c, value in (("cat", 0), ("dog", 255)):
            (tmp_path / split / c).mkdir(parents=True)
            buf = io.BytesIO()
            Image.fromarray(np.full((40, 60, 3), value, dtype=np.uint8)).save(buf, "PNG")
            (tmp_path / split / c / "a.png").write_bytes(buf.getvalue())
    x, y = data.load_dataset("folder", "test", tmp_path, channels=1, size=8)
    assert x.shape == (2, 1, 8, 8) and y.tolist() == [0, 1]
    assert float(x[0].max()) == 0 and abs(float(x[1].min()) - 1) < 1e-6
    assert data.class_names("folder", tmp_path) == ["cat", "dog"]
    with pytest.raises(ValueError, match="not an image"):
        data.image_from_bytes(b"not an image", 1, 16)


def test_bad_names():
    with pytest.raises(ValueError, match="unknown dataset 'svhn'"):
        data.load_dataset("svhn", "train")
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        data.load_dataset("digits", "val")


def test_ood_sets_and_corruptions():
    crops = data.ood_set("sample-image crops", 12)
    noise = data.ood_set("uniform noise", 12)
    assert crops.shape == noise.shape == (12, 1, 16, 16)
    assert 0 <= crops.min() and crops.max() <= 1 and crops.std() > 0.05
    assert torch.equal(crops, data.ood_set("sample-image crops", 12))
    xt, _ = data.load_dataset("digits", "test")
    x = xt[:20]
    for kind in data.CORRUPTIONS:
        dist = [float((data.corrupt(x, kind, s) - x).abs().mean()) for s in data.SEVERITIES]
        assert all(a < b for a, b in zip(dist, dist[1:])), (kind, dist)  # stronger with severity
    c = data.corrupt(x, "contrast", 5)
    torch.testing.assert_close(c.mean(dim=(1, 2, 3)), x.mean(dim=(1, 2, 3)))  # contrast keeps the mean
    # blur of a constant image is the same constant; blur keeps the total mass away from the borders
    const = torch.full((1, 1, 16, 16), 0.3)
    torch.testing.assert_close(data.corrupt(const, "blur", 5), const)
    with pytest.raises(ValueError, match="severity must be 1 to 5"):
        data.corrupt(x, "blur", 6)
    with pytest.raises(ValueError, match="unknown corruption"):
        data.corrupt(x, "fog", 1)


def test_a_shipped_datasets_ood_sets_hold_out_the_letters_only_when_asked():
    """What the ablation chooses on (held_out=False) and what the reports and the inspector show: the digits' shipped
    sets and the held-out letters, MNIST's near and far sets (none held out), each the set ood_set makes."""
    chosen, shown = data.shipped_ood_sets("digits", 8, held_out=False), data.shipped_ood_sets("digits", 8)
    assert tuple(chosen) == data.OOD_SETS and tuple(shown) == data.OOD_SETS + data.HELD_OUT
    assert all(torch.equal(x, data.ood_set(kind, 8)) for kind, x in shown.items())
    assert tuple(data.shipped_ood_sets("mnist", 3, held_out=False)) == tuple(data.shipped_ood_sets("mnist", 3))
    with pytest.raises(ValueError, match="no shipped OOD sets for dataset 'cifar10'"):
        data.shipped_ood_sets("cifar10", 3)


def test_mixed_digits_join_halves_of_two_test_digits_of_different_classes():
    """The near-OOD set: every image's left half is the left half of a test digit and its right half the right half
    of a test digit of another class (found by exact search over the test split)."""
    mixed = data.ood_set("mixed digits", 40)
    xt, yt = data.load_dataset("digits", "test")
    assert mixed.shape == (40, 1, 16, 16) and torch.equal(mixed, data.ood_set("mixed digits", 40))
    flat_l, flat_r = xt[..., :8].reshape(len(xt), -1), xt[..., 8:].reshape(len(xt), -1)
    for im in mixed:
        left = (flat_l == im[..., :8].reshape(1, -1)).all(1).nonzero()[:, 0]
        right = (flat_r == im[..., 8:].reshape(1, -1)).all(1).nonzero()[:, 0]
        assert len(left) and len(right)
        assert not set(yt[left].tolist()) & set(yt[right].tolist())  # no one class owns both halves


def test_augment_shifts_by_at_most_one_pixel():
    x = torch.zeros(64, 1, 16, 16)
    x[:, 0, 8, 8] = 1.0
    v = data.augment(x, torch.Generator().manual_seed(0))
    pos = v[:, 0].reshape(64, -1).argmax(-1)
    r, c = pos // 16, pos % 16
    assert (r - 8).abs().max() <= 1 and (c - 8).abs().max() <= 1
    assert len(set(zip(r.tolist(), c.tolist()))) > 3
    assert ((v.amax(dim=(1, 2, 3)) >= 0.8) & (v.amax(dim=(1, 2, 3)) <= 1.0)).all()
