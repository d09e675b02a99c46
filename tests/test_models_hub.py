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
