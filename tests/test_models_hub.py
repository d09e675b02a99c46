"""wviz.models.hub: the folders of WVIZ_MODELS (found, labelled, refused with a reason), sizes from the safetensors
headers against safetensors' own reader, offline loading, caching, and the bundled MiniLM first."""
import os
from pathlib import Path

import pytest
from safetensors import safe_open

from wviz.models import hub, minilm, tiny


def numbers_in(folder) -> int:
    """The floating-point numbers in a folder's weights, read by safetensors itself."""
    total = 0
    for path in Path(folder).glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            total += sum(t.numel() for t in map(f.get_tensor, f.keys()) if t.is_floating_point())
    return total


@pytest.fixture(scope="module")
def shelves(tmp_path_factory):
    """Two WVIZ_MODELS folders: one with a BERT, a GPT-2, a pickle-only model and a stray file; one with a ViT."""
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    tiny.save("gpt2", one / "b-gpt2")
    tiny.save("bert", one / "a-bert")
    (one / "c-pickled").mkdir()
    (one / "c-pickled" / "config.json").write_text('{"model_type": "bert"}')
    (one / "c-pickled" / "pytorch_model.bin").write_bytes(b"\x80\x04")
    (one / "notes.txt").write_text("not a model")
    tiny.save("vit", two / "tiny-vit")
    return one, two


def test_models_of_wviz_models_follow_the_bundled_minilm(shelves, monkeypatch):
    one, two = shelves
    monkeypatch.setenv("WVIZ_MODELS", os.pathsep.join([str(one), str(two), str(one / "missing")]))
    found = hub.find_models()
    assert [m.name for m in found.models] == ["all-MiniLM-L6-v2", "a-bert", "b-gpt2", "tiny-vit"]
    assert [m.family for m in found.models] == ["encoder", "encoder", "decoder", "image"]
    assert found.models[0].key == "bundled" and found.models[1].key == f"folder:{(one / 'a-bert').resolve()}"
    assert len(found.skipped) == 2
    assert "c-pickled" in found.skipped[0]
    assert "no weights in .safetensors files (pytorch_model.bin is a pickle file, which wviz never reads: convert it" \
        in found.skipped[0]
    assert found.skipped[1].endswith("missing: not a folder")
    for m in found.models[1:]:
        assert m.parameters == numbers_in(one / m.name if (one / m.name).exists() else two / m.name)
    assert found.models[3].label() == f"tiny-vit (image, {found.models[3].parameters / 1e3:.3g}k parameters)"
    assert found.models[0].parameters == numbers_in(hub.bundled_dir()) == 22_713_216    # MiniLM, pooler included


def test_a_folder_loads_offline_once_per_device(shelves):
    one, _ = shelves
    info = hub.describe(one / "b-gpt2")
    model = hub.load(info, "cpu")
    assert hub.load(info, "cpu") is model and hub.load(one / "b-gpt2", "cpu") is model
    assert model.head == "causal-lm" and model.model.config._attn_implementation == "wviz"
    assert not model.model.training and os.environ.get("HF_HUB_OFFLINE") == "1"
    assert model.family == "decoder" and model.tokenizer is not None and model.processor is None


def test_the_bundled_model_is_minilms():
    bundled = hub.load(None, "cpu")
    assert minilm.load("cpu")[0] is bundled.model and bundled.info.name == hub.BUNDLED
    assert minilm.model_dir() == hub.bundled_dir() and bundled.head is None


def test_a_refused_folder_says_why(shelves):
    one, _ = shelves
    with pytest.raises(ValueError, match="pytorch_model.bin is a pickle file"):
        hub.load(one / "c-pickled", "cpu")
    with pytest.raises(ValueError, match="no config.json"):
        hub.load(one / "nothing-here", "cpu")


def test_a_pickle_beside_the_safetensors_is_never_read(shelves, tmp_path):
    """A hub download often holds pytorch_model.bin too: the folder opens from its .safetensors, and the pickle
    (here one that would fail loudly if unpickled) is never touched."""
    import pickle
    import shutil

    folder = shutil.copytree(shelves[0] / "a-bert", tmp_path / "downloaded")
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps("not weights") + b"garbage")
    (folder / "training_args.bin").write_bytes(b"\x80\x04garbage")
    model = hub.load(folder, "cpu")
    assert model.head == "masked-lm" and model.info.parameters == hub.describe(shelves[0] / "a-bert").parameters


@pytest.fixture(scope="module")
def hostile_shelf(tmp_path_factory):
    """A WVIZ_MODELS folder of a good BERT beside the hostile folders of issue 49: a safetensors header that claims
    32B parameters, no attention heads, a vocabulary of "lots", a picture size of 30000 pixels."""
    import json
    import shutil
    import struct

    shelf = tmp_path_factory.mktemp("hostile")
    good = tiny.save("bert", shelf / "a-good-bert")
    vit = tiny.save("vit", tmp_path_factory.mktemp("vit") / "vit")

    def variant(name, source, file, change):
        folder = shutil.copytree(source, shelf / name)
        if isinstance(change, bytes):
            (folder / file).write_bytes(change)
        else:
            (folder / file).write_text(json.dumps(json.loads((folder / file).read_text()) | change))

    head = json.dumps({"w": {"dtype": "F32", "shape": [200_000, 160_000], "data_offsets": [0, 16]}}).encode()
    variant("shape-lie", good, "model.safetensors", struct.pack("<Q", len(head)) + head + bytes(16))
    variant("no-heads", good, "config.json", {"num_attention_heads": 0})
    variant("lots", good, "config.json", {"vocab_size": "lots"})
    variant("huge-pictures", vit, "preprocessor_config.json", {"size": 30000})
    return shelf


def test_a_hostile_folder_of_wviz_models_is_skipped_with_its_reason(hostile_shelf, monkeypatch):
    monkeypatch.setenv("WVIZ_MODELS", str(hostile_shelf))
    found = hub.find_models()
    assert [m.name for m in found.models] == ["all-MiniLM-L6-v2", "a-good-bert"]
    assert not any("B parameters" in m.label() for m in found.models)
    reasons = dict(line.split(": ", 1) for line in found.skipped)
    assert [Path(p).name for p in reasons] == ["huge-pictures", "lots", "no-heads", "shape-lie"]
    said = {Path(p).name: why for p, why in reasons.items()}
    assert 'tensor "w" of shape [200000, 160000] in F32 takes 128,000,000,000 bytes but its offsets hold 16' \
        in said["shape-lie"]
    assert "num_attention_heads must be a whole number from 1 to 256, not 0" in said["no-heads"]
    assert 'vocab_size must be a whole number from 1 to 1,000,000, not "lots"' in said["lots"]
    assert "size must give picture sides of 1 to 518 pixels" in said["huge-pictures"]
    monkeypatch.setattr(hub, "_instantiate", lambda *a: pytest.fail("transformers was asked to load a folder"))
    for name in said:
        with pytest.raises(ValueError, match="The model folder has a problem"):
            hub.load(hostile_shelf / name, "cpu")


def test_the_bundled_model_is_never_over_the_cap_that_holds_the_others(shelves, monkeypatch):
    """WVIZ_MAX_MODEL_MB holds every folder's weights in float32 (parameters x 4 bytes), the bundled MiniLM's
    91 MB excepted."""
    one, _ = shelves
    monkeypatch.setenv("WVIZ_MAX_MODEL_MB", "0.01")
    monkeypatch.setenv("WVIZ_MODELS", str(one))
    found = hub.find_models()
    assert [m.name for m in found.models] == ["all-MiniLM-L6-v2"]
    assert any("a-bert: " in s and "MB in float32" in s and "over the limit of 0.01 MB (WVIZ_MAX_MODEL_MB" in s
               for s in found.skipped)


def test_a_head_larger_than_the_weights_is_never_built(tmp_path, monkeypatch):
    """An image classifier whose config.json asks for 100,000 classes, the weights holding 7: the bare model is
    loaded (no head), and transformers never builds the head (which would be allocated before being found
    missing)."""
    import json

    import transformers

    folder = tiny.save("vit", tmp_path / "vit")
    config = json.loads((folder / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("id2label", "label2id")} | {"num_labels": 100_000}
    (folder / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(transformers.ViTForImageClassification, "from_pretrained",
                        classmethod(lambda *a, **k: pytest.fail("the head was built")))
    model = hub.load(folder, "cpu")
    assert model.head is None and model.family == "image"


@pytest.mark.parametrize("error", [ZeroDivisionError("integer modulo by zero"), AssertionError("Padding_idx"),
                                   "safetensors", "strict"])
def test_whatever_the_checks_miss_ends_as_one_sentence(shelves, monkeypatch, error):
    """hub.load promises a ValueError: an error of transformers, safetensors or torch that wviz's checks did not
    foresee (here raised on purpose) is one, saying which model could not be loaded."""
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    from safetensors import SafetensorError

    made = {"safetensors": SafetensorError("Error while deserializing header: InvalidOffset"),
            "strict": StrictDataclassFieldValidationError("vocab_size", TypeError("expected int"))}
    error = made.get(error, error)

    def broken(*args):
        raise error

    monkeypatch.setattr(hub, "_head_class", broken)
    info = hub.describe(shelves[0] / "a-bert")
    with pytest.raises(ValueError, match="^transformers could not load the model 'a-bert': ") as err:
        hub._load(info, "cpu")
    assert "\n" not in str(err.value)
