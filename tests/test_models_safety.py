"""wviz.models.safety and hub.load_upload: hostile uploads refused with a plain message and nothing written outside
the temporary folder (which is removed), a good upload loaded; pictures that are not pictures refused."""
import io
import json
import os
import pickle
import stat
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from wviz.models import hub, lens, safety, tiny


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    return tiny.save("bert", tmp_path_factory.mktemp("good") / "tiny-bert")


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Temporary folders go under tmp_path/tmp, so that a test sees everything an upload wrote."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp_path


def zipped(files: dict, top: str = "my-model/", links=()) -> bytes:
    """A zip of {name: bytes} under ``top``; ``links``: names stored as symbolic links."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(top + name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if name in links:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, data)
    return buf.getvalue()


def folder_files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(raw: bytes, scratch: Path, match: str) -> str:
    before = everything(scratch)
    with pytest.raises(ValueError, match=match) as err:
        hub.load_upload(raw, "cpu")
    assert everything(scratch) == before, "an upload left something behind"
    assert list((scratch / "tmp").iterdir()) == []
    return str(err.value)


def test_a_good_upload_loads_and_leaves_nothing_behind(bert_folder, scratch):
    raw = zipped(folder_files(bert_folder) | {"README.md": b"ignored"})
    model = hub.load_upload(raw, "cpu", name="my-model")
    assert model.info.key.startswith("upload:") and len(model.info.key) == len("upload:") + 64
    assert model.info.label().startswith("my-model (encoder, ") and model.head == "masked-lm"
    assert everything(scratch) == ["tmp"]
    fwd = lens.forward(model, "the cat sat")
    assert fwd.attention.shape == (1, 2, 4, 5, 5)
    flat = zipped(folder_files(bert_folder), top="")                # files at the zip's top work too
    assert hub.load_upload(flat, "cpu").info.parameters == model.info.parameters


def test_paths_outside_the_folder_and_links_are_refused(bert_folder, scratch):
    files = folder_files(bert_folder)
    message = refused(zipped(files | {"../evil.json": b"{}"}, top=""), scratch, "leads outside")
    assert "evil.json" in message and not (scratch / "evil.json").exists()
    refused(zipped(files | {"a/../../evil.json": b"{}"}), scratch, "leads outside")
    refused(zipped(files | {"/etc/evil.json": b"{}"}, top=""), scratch, "absolute path")
    refused(zipped(files | {"vocab.txt": b"/etc/passwd"}, links=("vocab.txt",)), scratch, "symbolic link")
    refused(zipped(files | {"x\\..\\evil.json": b"{}"}), scratch, "backslashes")


def test_a_zip_bomb_and_contents_over_the_cap_are_refused(bert_folder, scratch, monkeypatch):
    files = folder_files(bert_folder)
    refused(zipped(files | {"zeros.json": b"0" * (8 * 2 ** 20)}), scratch, "refused as a zip bomb")
    monkeypatch.setenv("WVIZ_MAX_MODEL_MB", "1")
    hexes = os.urandom(600_000).hex().encode()                      # packs to half its 1.2 MB: no bomb, over 1 MB
    refused(zipped(files | {"big.json": hexes}), scratch, "contents unpack to 1.2 MB, over the limit of 1 MB")
    refused(os.urandom(2 ** 21), scratch, r"it is 2.0 MB, over the limit.*WVIZ_MAX_MODEL_MB")
    monkeypatch.setenv("WVIZ_MAX_MODEL_MB", "lots")
    with pytest.raises(ValueError, match="WVIZ_MAX_MODEL_MB must be a number"):
        safety.max_model_bytes()


def test_pickles_code_and_the_models_own_code_are_refused(bert_folder, scratch):
    files = folder_files(bert_folder)
    evil = pickle.dumps({"weights": [1, 2, 3]})
    message = refused(zipped(files | {"pytorch_model.bin": evil}), scratch, "pytorch_model.bin is a pickle file")
    assert "save_pretrained(out, safe_serialization=True)" in message
    refused(zipped({k: v for k, v in files.items() if k != "model.safetensors"} | {"model.pt": evil}), scratch,
            "model.pt is a pickle file")
    refused(zipped(files | {"modeling_evil.py": b"import os"}), scratch, "Python code")
    config = json.loads(files["config.json"]) | {"auto_map": {"AutoModel": "modeling_evil.EvilModel"}}
    refused(zipped(files | {"config.json": json.dumps(config).encode()}), scratch,
            "config.json has an auto_map: the model needs its own code")
    tok = json.loads(files["tokenizer_config.json"]) | {"auto_map": {"AutoTokenizer": ["evil.Tok", None]}}
    refused(zipped(files | {"tokenizer_config.json": json.dumps(tok).encode()}), scratch, "tokenizer_config.json has")


def test_unsupported_models_and_broken_files_get_a_plain_message(bert_folder, scratch):
    files = folder_files(bert_folder)
    config = json.loads(files["config.json"])
    message = refused(zipped(files | {"config.json": json.dumps(config | {"model_type": "mpnet"}).encode()}),
                      scratch, "cannot open a model of type 'mpnet'")
    assert "encoders (BERT" in message and "decoders (GPT-2" in message and "image classifiers (ViT, DeiT)" in message
    refused(zipped(files | {"model.safetensors": os.urandom(4096)}), scratch, "not a safetensors file")
    refused(zipped(files | {"model.safetensors": files["model.safetensors"][:-100]}), scratch, "cut short")
    refused(zipped(files | {"config.json": b"{not json"}), scratch, "config.json is not valid JSON")
    refused(zipped({k: v for k, v in files.items() if k != "config.json"}), scratch, "no config.json")
    refused(zipped({k: v for k, v in files.items() if not k.startswith("tokenizer")}), scratch, "no tokenizer files")
    refused(b"PK\x03\x04 not really a zip", scratch, "not a .zip file")
    bigger = json.dumps(config | {"hidden_size": 256, "intermediate_size": 1024}).encode()
    refused(zipped(files | {"config.json": bigger}), scratch, "describes a model of .* parameters but")


def test_weights_that_miss_a_tensor_are_refused_not_filled_with_random_numbers(bert_folder, scratch):
    from safetensors.torch import load_file, save_file

    files = folder_files(bert_folder)
    weights = load_file(str(bert_folder / "model.safetensors"))
    del weights["bert.encoder.layer.1.attention.self.query.weight"]
    cut = scratch / "cut.safetensors"
    save_file(weights, str(cut), metadata={"format": "pt"})
    refused(zipped(files | {"model.safetensors": cut.read_bytes()}), scratch,
            r"the weights lack 1 of the model's tensors \(encoder.layer.1.attention.self.query.weight\)")


def test_too_many_files_are_refused(bert_folder, scratch):
    refused(zipped({f"f{i}.json": b"{}" for i in range(1001)}), scratch, "1001 files")


def test_duplicate_entries_are_refused(bert_folder, scratch):
    files = folder_files(bert_folder)
    buf = io.BytesIO(zipped(files))
    with pytest.warns(UserWarning), zipfile.ZipFile(buf, "a") as z:   # zipfile warns of the duplicate name
        z.writestr("my-model/config.json", files["config.json"])
    refused(buf.getvalue(), scratch, "appears twice")


def png(size=(20, 10), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, 128).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("raw, match", [
    (b"hello, I am text", "not a picture PIL can read"),
    (png()[:40], "not a picture PIL can read"),
    (png(mode="I;16"), "16-bit or float"),
    (png((8000, 6000), mode="1"), "8000 x 6000 pixels"),
    (b"\x00" * (11 * 2 ** 20), "it is 11.0 MB"),
])
def test_a_picture_that_is_not_one_is_refused(raw, match):
    with pytest.raises(ValueError, match=match) as err:
        safety.read_picture(raw)
    assert "A valid picture is a PNG, JPEG or BMP" in str(err.value)


def test_pictures_reach_an_image_model_as_bytes_or_images(tmp_path):
    vit = hub.load(tiny.save("vit", tmp_path / "tiny-vit"), "cpu")
    as_bytes = lens.forward(vit, png((40, 30)))
    as_image = lens.forward(vit, Image.new("RGB", (40, 30), 128))
    assert torch.equal(as_bytes.attention, as_image.attention)
    with pytest.raises(ValueError, match="not a picture PIL can read"):
        lens.forward(vit, b"GIF89a")
    with pytest.raises(ValueError, match="picture 1 must be a PIL image"):
        lens.forward(vit, "a sentence")


def test_the_upload_cap_is_the_same_for_wviz_streamlit_and_nginx(monkeypatch):
    """safety.MAX_MODEL_MB, .streamlit/config.toml's server.maxUploadSize and deploy/serve.py's UPLOAD_MB state one cap
    (a smaller Streamlit or nginx limit would refuse a model wviz accepts, before wviz can say why); make serve raises
    the replicas' and nginx's limits to a larger WVIZ_MAX_MODEL_MB, rounded up, and keeps its own for a bad value."""
    import importlib.util
    import sys
    import tomllib

    root = Path(__file__).parents[1]
    config = tomllib.loads((root / ".streamlit" / "config.toml").read_text())
    spec = importlib.util.spec_from_file_location("serve", root / "deploy" / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "serve", serve)   # dataclasses look their module up there
    spec.loader.exec_module(serve)
    assert safety.MAX_MODEL_MB == config["server"]["maxUploadSize"] == serve.UPLOAD_MB == 600
    assert [serve.upload_mb(env) for env in ({}, {"WVIZ_MAX_MODEL_MB": "1200.5"}, {"WVIZ_MAX_MODEL_MB": "100"},
                                             {"WVIZ_MAX_MODEL_MB": "lots"}, {"WVIZ_MAX_MODEL_MB": "inf"})] == \
        [600, 1201, 600, 600, 600]
    conf = serve.render_conf(8501, [8502, 8503], serve.upload_mb({"WVIZ_MAX_MODEL_MB": "1200.5"}))
    assert f"client_max_body_size {1201 + serve.FORM_MB}m;" in conf and "{" + "body_mb}" not in conf
