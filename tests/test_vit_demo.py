"""The models a page compares: the bundled pair, the twin left out where it cannot read the main model's images,
and the digest that keys an evaluation on the weights themselves. (The fallback from a refused upload to the demo
is driven through the inspector's view: tests/views/test_uncertainty_inspector.py.)"""

import torch

from wviz.vit.demo import Loaded, load_bundled, model_set, weights_digest
from wviz.vit.model import ViTConfig, build_model


def test_the_bundled_pair_reads_the_digits():
    pair = model_set(load_bundled("stochastic", "cpu"), load_bundled("deterministic", "cpu"))
    assert list(pair.by_name) == ["stochastic", "deterministic"] and pair.main.weights_id == "bundled:stochastic"
    assert pair.stochastic and pair.reads_digits and pair.config.grid == 4


def test_the_twin_is_left_out_for_other_images():
    twin = load_bundled("deterministic", "cpu")
    rgb = build_model(ViTConfig(kind="stochastic", image_size=32, patch_size=8, channels=3, dim=8, depth=1, heads=2))
    alone = model_set(Loaded("uploaded (stochastic)", rgb, {}, "upload:x"), twin)
    assert list(alone.by_name) == ["uploaded (stochastic)"] and alone.twin is twin and not alone.reads_digits


def test_the_weights_digest_follows_the_weights_not_the_file():
    a, b = load_bundled("stochastic", "cpu").model, load_bundled("stochastic", "cpu").model
    assert a is not b and weights_digest(a) == weights_digest(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-6
    assert weights_digest(a) != weights_digest(b)
    assert weights_digest(a) != weights_digest(load_bundled("deterministic", "cpu").model)
