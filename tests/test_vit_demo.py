"""The models a page compares: the bundled pair, the twin left out where it cannot read the main model's images,
and the digest that keys an evaluation on the weights themselves. (The fallback from a refused upload to the demo
is driven through the inspector's view: tests/views/test_uncertainty_inspector.py.)"""

import pytest
import torch

from wviz.vit import data
from wviz.vit.demo import (Loaded, bundled_pair, data_place, load_bundled, model_set, shipped_data, shipped_split,
                            weights_digest)
from wviz.vit.model import ViTConfig, build_model


def test_the_bundled_pair_reads_the_digits():
    pair = bundled_pair("cpu", "digits")
    assert list(pair.by_name) == ["stochastic", "deterministic"] and pair.main.weights_id == "bundled:digits:stochastic"
    assert pair.stochastic and pair.dataset == "digits" and pair.config.grid == 4


def test_the_twin_is_left_out_for_other_images():
    twin = load_bundled("deterministic", "cpu", "digits")
    rgb = build_model(ViTConfig(kind="stochastic", image_size=32, patch_size=8, channels=3, dim=8, depth=1, heads=2))
    alone = model_set(Loaded("uploaded (stochastic)", rgb, {}, "upload:x"), twin)
    assert list(alone.by_name) == ["uploaded (stochastic)"] and alone.twin is twin and alone.dataset is None


def test_the_weights_digest_follows_the_weights_not_the_file():
    a, b = load_bundled("stochastic", "cpu", "digits").model, load_bundled("stochastic", "cpu", "digits").model
    assert a is not b and weights_digest(a) == weights_digest(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-6
    assert weights_digest(a) != weights_digest(b)
    assert weights_digest(a) != weights_digest(load_bundled("deterministic", "cpu", "digits").model)


def _mnist_model(data_name: str) -> Loaded:
    model = build_model(ViTConfig(kind="stochastic", image_size=28, patch_size=4, channels=1, dim=8, depth=1, heads=2))
    return Loaded("uploaded (stochastic)", model, {"data": data_name}, "upload:x")


def test_an_mnist_model_gets_the_shipped_mnist_split_its_ood_sets_and_corruptions(monkeypatch):
    """A checkpoint trained with --data mnist is shown on MNIST's 1,000 test digits with MNIST's near and far sets and
    its seven corruptions (nothing to find on disk), without the digits' twin; the dataset panel evaluates exactly
    those sets and corruptions. A 28 x 28 model whose record says digits reads neither shipped set."""
    from wviz.vit import mnist, panel

    main = _mnist_model("mnist")
    place = data_place(main)
    assert (place.kind, place.missing) == ("mnist", False)
    split = shipped_split("mnist")
    x, y = mnist.load("test")
    assert torch.equal(split.images, x) and torch.equal(split.labels, y) and split.title == "MNIST test split"
    assert split.ood_names == mnist.NEAR + mnist.FAR and split.corruptions == mnist.CORRUPTIONS
    assert all(torch.equal(split.ood_images[k], v) for k, v in mnist.ood_sets(len(y)).items())
    models = model_set(main, load_bundled("deterministic", "cpu", "digits"))
    assert list(models.by_name) == ["uploaded (stochastic)"] and models.dataset == "mnist"
    assert shipped_data(_mnist_model("digits")) is None and data_place(_mnist_model("digits")).kind == "unknown"

    asked = {}

    def spy(model, images, labels, ood_sets, samples, corruptions, progress, reference):
        asked.update(images=images, ood=ood_sets, corruptions=corruptions, reference=reference)
        raise RuntimeError("asked")

    monkeypatch.setattr(panel.vit_evaluate, "evaluate", spy)
    (job,) = panel.panel_jobs(models, split)
    with pytest.raises(RuntimeError, match="asked"):
        panel.evaluate_panel(job)
    assert asked["images"] is split.images and asked["ood"] is split.ood_images
    assert asked["corruptions"] == mnist.CORRUPTIONS and asked["reference"] is None   # its record holds out none
    # a record that held out a validation split of MNIST's training digits: its images are the reference
    models = model_set(Loaded(main.name, main.model, {"data": "mnist", "val_fraction": 0.1}, "upload:y"), models.twin)
    with pytest.raises(RuntimeError, match="asked"):
        panel.evaluate_panel(panel.panel_jobs(models, split)[0])
    x, y = mnist.load("train")
    assert torch.equal(asked["reference"], data.carve_validation(x, y, 0.1)[2]) and len(asked["reference"]) == 400
