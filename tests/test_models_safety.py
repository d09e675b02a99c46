"""wviz.models.safety and hub.load_upload: hostile uploads refused with a plain message and nothing written outside
the temporary folder (which is removed), a good upload loaded; pictures that are not pictures refused."""
import io
import json
import os
import pickle
import shutil
import stat
import struct
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from wviz.io import zip_entries
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
    refused(zipped(files | {"model.safetensors": files["model.safetensors"][:-100]}), scratch,
            "model.safetensors: truncated safetensors file")
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
    refused(zipped({f"f{i}.json": b"{}" for i in range(1001)}), scratch, "it holds 1,001 files; a model folder has")


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


# Every number a folder brings is checked before anything is allocated (issue 49). `hostile` folders are tiny models
# with one number changed; `unloaded` asserts the refusal comes from the checks, before transformers reads a byte.

@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny")
    return {kind: tiny.save(kind, base / kind) for kind in ("bert", "roberta", "distilbert", "gpt2", "llama", "qwen2",
                                                            "mistral", "vit")}


REMOVED = "(removed)"


def hostile(tiny_folders, tmp_path, kind, config=None, processor=None, files=None) -> Path:
    """A copy of a tiny ``kind`` with config.json's and preprocessor_config.json's keys changed (REMOVED: left out)
    and ``files`` ({name: bytes}) written over its own."""
    folder = shutil.copytree(tiny_folders[kind], tmp_path / f"hostile-{kind}")
    for name, change in (("config.json", config), ("preprocessor_config.json", processor)):
        if change:
            data = json.loads((folder / name).read_text()) | change
            (folder / name).write_text(json.dumps({k: v for k, v in data.items() if v != REMOVED}))
    for name, raw in (files or {}).items():
        (folder / name).write_bytes(raw)
    return folder


def unloaded(folder: Path, match: str, monkeypatch) -> str:
    """The refusal of ``folder`` by check_folder, and by hub.load without transformers loading anything."""
    with pytest.raises(ValueError, match=match) as err:
        safety.check_folder(folder)
    monkeypatch.setattr(hub, "_instantiate", lambda *a: pytest.fail("transformers was asked to load the folder"))
    with pytest.raises(ValueError, match=match):
        hub.load(folder, "cpu")
    return str(err.value)


@pytest.mark.parametrize("processor", [
    {"size": {"height": 6000, "width": 6000}},
    {"size": 30000},
    {"size": {"shortest_edge": 30000}},
    {"size": [6000, 6000]},
    {"crop_size": {"height": 30000, "width": 32}},
    {"size": {"height": 0, "width": 32}},
    {"size": {"height": "lots", "width": 32}},
    {"size": {"depth": 32}},
    {"size": True},
])
def test_a_picture_size_over_518_pixels_is_refused_before_anything_is_allocated(tiny_folders, tmp_path, monkeypatch,
                                                                                 processor):
    import tracemalloc

    folder = hostile(tiny_folders, tmp_path, "vit", processor=processor)
    message = unloaded(folder, "preprocessor_config.json's (crop_)?size must give picture sides of 1 to 518 pixels",
                       monkeypatch)
    assert message.count("\n- ") == 1 and json.dumps(next(iter(processor.values())))[:20] in message
    tracemalloc.start()                                    # numpy's and Python's allocations: a picture's included
    try:
        with pytest.raises(ValueError):
            hub.load(folder, "cpu")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 20, f"{peak / 2 ** 20:.1f} MB allocated"     # 30000 x 30000 pixels took 22 GB (issue 49)


@pytest.mark.parametrize("processor, match", [
    ({"image_std": [0.5, 0, 0.5]}, r"image_std must be one number or three, none 0, not \[0.5, 0, 0.5\]"),
    ({"image_mean": [0.5, 0.5]}, r"image_mean must be one number or three, not \[0.5, 0.5\]"),
    ({"image_mean": 1e300}, r"image_mean must be one number or three, not 1e\+300"),
    ({"rescale_factor": "lots"}, 'rescale_factor must be a number other than 0, not "lots"'),
])
def test_an_image_processors_numbers_are_finite(tiny_folders, tmp_path, monkeypatch, processor, match):
    unloaded(hostile(tiny_folders, tmp_path, "vit", processor=processor), "preprocessor_config.json's " + match,
             monkeypatch)


@pytest.mark.parametrize("longest", ["lots", [1, 2], True, 0])
def test_a_tokenizers_longest_text_is_a_positive_number(tiny_folders, tmp_path, monkeypatch, longest):
    folder = hostile(tiny_folders, tmp_path, "gpt2")
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text()) | {"model_max_length": longest}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    unloaded(folder, "tokenizer_config.json's model_max_length must be a positive number of tokens, not "
             + json.dumps(longest).replace("[", r"\["), monkeypatch)


def test_an_image_processor_must_make_the_pictures_the_model_reads(tiny_folders, tmp_path, monkeypatch):
    unloaded(hostile(tiny_folders, tmp_path, "vit", processor={"image_processor_type": "DetrImageProcessor"}),
             "names the image processor \"DetrImageProcessor\"; wviz reads ViT's and DeiT's only", monkeypatch)
    monkeypatch.undo()
    largest = hostile(tiny_folders, tmp_path / "518", "vit", processor={"size": {"height": 518, "width": 518}})
    assert safety.check_folder(largest).family == "image"          # within the bounds, but not this model's size
    with pytest.raises(ValueError, match="makes pictures of 518 x 518 pixels in 3 channels, but config.json's model "
                                         "reads 32 x 32 in 3"):
        hub.load(largest, "cpu")
    unresized = hostile(tiny_folders, tmp_path / "raw", "vit", processor={"do_resize": False})
    with pytest.raises(ValueError, match="makes pictures of 8 x 8 pixels"):
        hub.load(unresized, "cpu")


WHOLE = "must be a whole number from 1 to"


@pytest.mark.parametrize("kind, config, match", [
    ("bert", {"num_attention_heads": 0}, f"num_attention_heads {WHOLE} 256, not 0"),
    ("bert", {"num_attention_heads": 5}, r"hidden_size \(32\) must split evenly into num_attention_heads \(5\)"),
    ("bert", {"num_attention_heads": REMOVED, "hidden_size": 40},
     r"hidden_size \(40\) must split evenly into the default num_attention_heads \(12\) attention heads"),
    ("bert", {"vocab_size": "lots"}, f'vocab_size {WHOLE} 1,000,000, not "lots"'),
    ("bert", {"num_hidden_layers": 1e300}, f"num_hidden_layers {WHOLE} 256, not 1e\\+300"),
    ("bert", {"num_hidden_layers": -1}, f"num_hidden_layers {WHOLE} 256, not -1"),
    ("bert", {"num_hidden_layers": True}, f"num_hidden_layers {WHOLE} 256, not true"),
    ("bert", {"num_hidden_layers": 2.0}, f"num_hidden_layers {WHOLE} 256, not 2.0"),
    ("bert", {"num_hidden_layers": 257}, f"num_hidden_layers {WHOLE} 256, not 257"),
    ("bert", {"max_position_embeddings": 10 ** 9}, f"max_position_embeddings {WHOLE} 2,097,152, not 1000000000"),
    ("bert", {"pad_token_id": 500}, r"pad_token_id \(500\) must be a token of its vocabulary \(0 to 26\)"),
    ("roberta", {"max_position_embeddings": 1},
     r"max_position_embeddings \(1\) leaves no position for a token after RoBERTa's offset of pad_token_id \+ 1"),
    ("roberta", {"pad_token_id": None}, "pad_token_id must be a token of its vocabulary: RoBERTa counts positions"),
    ("distilbert", {"n_heads": 0}, f"n_heads {WHOLE} 256, not 0"),
    ("gpt2", {"n_layer": "12"}, f'n_layer {WHOLE} 256, not "12"'),
    ("gpt2", {"num_attention_heads": 8}, "gives num_attention_heads twice, differently: num_attention_heads 8 and n_h"),
    ("llama", {"num_key_value_heads": 3}, r"num_attention_heads \(4\) must be a multiple of num_key_value_heads \(3\)"),
    ("llama", {"num_key_value_heads": 0}, f"num_key_value_heads {WHOLE} 256, not 0"),
    ("qwen2", {"num_key_value_heads": REMOVED},
     r"num_attention_heads \(4\) must be a multiple of the default num_key_value_heads \(32\)"),
    ("qwen2", {"num_key_value_heads": 8}, r"num_attention_heads \(4\) must be a multiple of num_key_value_heads \(8\)"),
    ("mistral", {"num_key_value_heads": None}, f"num_key_value_heads {WHOLE} 256, not null"),
    ("vit", {"image_size": 6000}, f"image_size {WHOLE} 518, not 6000"),
    ("vit", {"patch_size": 0}, f"patch_size {WHOLE} 518, not 0"),
    ("vit", {"patch_size": 7}, r"patch_size \(7\) must divide its image_size \(32\)"),
    ("vit", {"image_size": [32, 30], "patch_size": [8, 8]}, r"patch_size \(\[8, 8\]\) must divide its image_size"),
    ("vit", {"num_channels": 4}, f"num_channels {WHOLE} 3, not 4"),
    ("vit", {"num_labels": 10 ** 6}, f"num_labels {WHOLE} 100,000, not 1000000"),
])
def test_a_config_number_out_of_bounds_is_refused_before_anything_is_allocated(tiny_folders, tmp_path, monkeypatch,
                                                                               kind, config, match):
    message = unloaded(hostile(tiny_folders, tmp_path, kind, config=config), "config.json('s)? " + match, monkeypatch)
    assert message.startswith("The model folder has a problem:\n- config.json")


def test_sizes_that_transformers_derives_may_be_null(tiny_folders, tmp_path):
    """GPT-2's n_inner and Llama's and Qwen2's num_key_value_heads may be null (transformers derives them)."""
    for kind, config in (("gpt2", {"n_inner": None}), ("llama", {"num_key_value_heads": None}),
                         ("qwen2", {"num_key_value_heads": None})):
        folder = hostile(tiny_folders, tmp_path / kind, kind, config=config)
        assert safety.check_folder(folder).family == "decoder"


def safetensors_file(header: dict, data: bytes = b"") -> bytes:
    """A safetensors file written by hand: 8 bytes of header length, the header (JSON), the data."""
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


def tensor(dtype, shape, begin, end) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


@pytest.mark.parametrize("header, data, match", [
    ({"w": tensor("Q9", [2], 0, 8)}, 8, 'tensor "w" has the dtype "Q9"; wviz reads F64, F32, F16, BF16, I64'),
    ({"w": tensor("F32", [2], 0, 8), "b": tensor("F32", [2], 4, 12)}, 12, 'tensor "b" overlaps the tensor before it'),
    ({"w": tensor("F32", [1], 0, 4), "b": tensor("F32", [1], 8, 12)}, 12, 'tensor "b" starts 4 bytes after the one'),
    ({"w": tensor("F32", [3], 0, 8)}, 8, r'tensor "w" of shape \[3\] in F32 takes 12 bytes but its offsets hold 8'),
    ({"w": tensor("F32", [200_000, 40_000], 0, 16)}, 16, "takes 32,000,000,000 bytes but its offsets hold 16"),
    ({"w": tensor("F32", [-1], 0, 0)}, 0, r'tensor "w" has the shape \[-1\], not a list of up to 8 whole'),
    ({"w": tensor("F32", [2.5], 0, 10)}, 10, "has the shape \\[2.5\\]"),
    ({"w": tensor("F32", [2], 8, 0)}, 8, r'has the data_offsets \[8, 0\], not \[begin, end\]'),
    ({"w": tensor("F32", [2], 0, 8)}, 12, "4 bytes follow its last tensor"),
    ({"w": tensor("F32", [4], 0, 16)}, 8, "truncated safetensors file: its header describes 16 bytes of tensors, the "
                                          "file has 8"),
    ({"w": tensor("F32", [2], 0, 8), "__metadata__": {"format": 1}}, 8, "its header is not a table of tensors"),
    ({"w": [1, 2]}, 0, 'tensor "w" has the dtype null'),
])
def test_a_safetensors_header_that_is_not_sound_is_refused_as_safetensors_would(tiny_folders, tmp_path, monkeypatch,
                                                                                header, data, match):
    from safetensors import SafetensorError, safe_open

    raw = safetensors_file(header, bytes(data))
    folder = hostile(tiny_folders, tmp_path, "bert", files={"model.safetensors": raw})
    unloaded(folder, "model.safetensors: .*" + match, monkeypatch)
    with pytest.raises((SafetensorError, ValueError)):        # safetensors itself refuses each of them
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            [f.get_tensor(k) for k in f.keys()]


ONE_READER = [   # (a safetensors file, what is wrong with it): both callers read it with wviz.safetensors_header
    (struct.pack("<Q", 10 ** 6) + b"{}", "truncated safetensors file, or not a safetensors file: its header needs "
                                         "1,000,000 bytes but only 2 follow"),
    (struct.pack("<Q", 11) + b"{not: json}", "not a safetensors file: its header is not JSON"),
    (safetensors_file({"w": tensor("Q9", [2], 0, 8)}, bytes(8)),
     'not a sound safetensors file: tensor "w" has the dtype "Q9"; wviz reads F64, F32, F16, BF16'),
    (safetensors_file({"w": tensor("F32", [2], 0, 8), "b": tensor("F32", [2], 4, 12)}, bytes(12)),
     'not a sound safetensors file: tensor "b" overlaps the tensor before it'),
    (safetensors_file({"w": tensor("F32", [1], 0, 4), "b": tensor("F32", [1], 8, 12)}, bytes(12)),
     'not a sound safetensors file: tensor "b" starts 4 bytes after the one before'),
    (safetensors_file({"w": tensor("F32", [3], 0, 8)}, bytes(8)),
     r'not a sound safetensors file: tensor "w" of shape \[3\] in F32 takes 12 bytes but its offsets hold 8'),
]


@pytest.mark.parametrize("raw, match", ONE_READER, ids=[m[:40] for _, m in ONE_READER])
def test_one_safetensors_reader_refuses_an_unsound_header_for_model_folders_and_checkpoints(tiny_folders, tmp_path,
                                                                                           monkeypatch, raw, match):
    from wviz.safetensors_header import read_header
    from wviz.vit.checkpoint import CHECKPOINT_HEADER, load_checkpoint

    for limits in (safety.MODEL_HEADER, CHECKPOINT_HEADER):
        with pytest.raises(ValueError, match="^" + match):
            read_header(io.BytesIO(raw), len(raw), limits)
    with pytest.raises(ValueError, match="^" + match):     # the inspector's page names the checkpoint itself
        load_checkpoint(raw, name="c.safetensors")
    folder = hostile(tiny_folders, tmp_path, "bert", files={"model.safetensors": raw})
    message = unloaded(folder, "model.safetensors: " + match, monkeypatch)
    assert message.startswith("The model folder has a problem:\n- model.safetensors: ")


def test_a_header_over_the_limit_and_weights_over_the_cap_in_float32_are_refused(tiny_folders, tmp_path, monkeypatch):
    huge = struct.pack("<Q", safety.MAX_HEADER + 1) + b" " * (safety.MAX_HEADER + 8)
    unloaded(hostile(tiny_folders, tmp_path, "bert", files={"model.safetensors": huge}),
             "model.safetensors: not a valid safetensors file: its header claims 8,388,609 bytes; a model's takes at "
             "most 8,388,608", monkeypatch)
    half = tmp_path / "half.safetensors"                  # F16 and I64: parameters in float32, buffers as they are
    half.write_bytes(safetensors_file({"w": tensor("F16", [4], 0, 8), "ids": tensor("I64", [2], 8, 24)}, bytes(24)))
    assert safety._tensors(half) == (4, 4 * 4 + 2 * 8)
    bert = tiny_folders["bert"]
    parameters = safety.check_folder(bert).parameters
    monkeypatch.setenv("WVIZ_MAX_MODEL_MB", str(parameters * 4 / 2 ** 20 * 0.9))
    unloaded(bert, f"its weights take 0.0.* MB in float32 \\({parameters:,} parameters\\), over the limit of .* MB "
                   r"\(WVIZ_MAX_MODEL_MB sets it\)", monkeypatch)


def test_a_json_file_over_32_mb_is_never_parsed(tiny_folders, tmp_path, monkeypatch):
    big = b'{"model_type": "bert", "junk": [' + b"123456," * ((safety.MAX_JSON + 2 ** 21) // 7) + b"0]}"
    folder = hostile(tiny_folders, tmp_path, "bert", files={"tokenizer.json": big})
    monkeypatch.setattr(safety.json, "loads", lambda *a, **k: pytest.fail("a JSON file was parsed"))
    unloaded(folder, "has a problem:\n- tokenizer.json is 34 MB; a model's JSON files take at most 32 MB$", monkeypatch)


def test_a_shard_index_names_only_files_of_the_folder(tiny_folders, tmp_path, monkeypatch):
    index = {"metadata": {}, "weight_map": {"bert.embeddings.word_embeddings.weight": "../other/model.safetensors"}}
    folder = hostile(tiny_folders, tmp_path, "bert",
                     files={"model.safetensors.index.json": json.dumps(index).encode()})
    unloaded(folder, 'model.safetensors.index.json names "../other/model.safetensors", not a .safetensors file of the '
                     "folder", monkeypatch)


def test_a_good_folder_of_every_family_passes_the_checks(tiny_folders):
    for kind, folder in tiny_folders.items():
        assert safety._shape_problems(json.loads((folder / "config.json").read_text())) == [], kind
        assert safety.check_folder(folder).parameters > 0


# Zips: the entries are counted from the end record before zipfile parses the directory.

def as_zip64(raw: bytes, count: int | None = None) -> bytes:
    """``raw`` (a zip without a comment) with ZIP64's end record and locator before its end record, which then
    defers to them (0xFFFF entries), as zip tools write a large zip; ``count``: the entries ZIP64's record states."""
    _, _, _, entries, _, size, offset, _ = struct.unpack("<4s4H2LH", raw[-22:])
    body = raw[:-22]
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, count or entries, size, offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(body), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return body + record + locator + end


def never_parsed(monkeypatch):
    monkeypatch.setattr(safety.zipfile, "ZipFile", lambda *a, **k: pytest.fail("zipfile parsed the directory"))


def test_a_zip_whose_end_record_counts_too_many_entries_is_refused_before_it_is_parsed(scratch, monkeypatch):
    """The end record of a zip of a million entries (88 MB; zipfile took 16 s and 700 MB to parse its directory)
    is enough: the count is read from it, and zipfile never sees the zip."""
    plain = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 65535, 65535, 0, 0, 0)
    million = as_zip64(zipped({"config.json": b"{}"}), count=1_000_000)
    commented = million[:-2] + struct.pack("<H", 5) + b"hello"   # a comment after the end record
    never_parsed(monkeypatch)
    refused(plain, scratch, "it holds 65,535 files; a model folder has tens of them")
    refused(million, scratch, r"it holds 1,000,000 files; .*wviz opens zips of at most 1,000\)")
    refused(commented, scratch, "1,000,000 files")


def test_a_zip_whose_end_record_understates_its_entries_is_counted_by_their_signatures(scratch, monkeypatch):
    raw = zipped({f"f{i}.json": b"{}" for i in range(1001)})
    end = struct.unpack("<4s4H2LH", raw[-22:])
    forged = raw[:-22] + struct.pack("<4s4H2LH", *end[:3], 1, 1, *end[5:])
    assert zip_entries(forged) == 1001 and struct.unpack("<4s4H2LH", forged[-22:])[4] == 1
    never_parsed(monkeypatch)
    refused(forged, scratch, "it holds 1,001 files")


def test_a_good_upload_in_zip64_form_loads(bert_folder, scratch):
    raw = as_zip64(zipped(folder_files(bert_folder)))
    with zipfile.ZipFile(io.BytesIO(raw)) as z:             # zipfile reads the forged ZIP64 records as its own
        assert len(z.infolist()) == zip_entries(raw) == len(folder_files(bert_folder))
    assert hub.load_upload(raw, "cpu").head == "masked-lm"


@pytest.mark.parametrize("change, match", [
    (-1, "is damaged: its bytes are not what the zip's directory says \\(their size or checksum\\)"),
    (+1000, "unpacks to fewer bytes than its header declares"),
])
def test_a_member_whose_size_is_not_the_one_declared_is_refused_as_it_is_read(bert_folder, scratch, change, match):
    raw = bytearray(zipped(folder_files(bert_folder)))
    at = struct.unpack_from("<L", raw, len(raw) - 6)[0]          # the directory's first entry (the end record says)
    name = b"my-model/config.json"
    while raw[at + 46:at + 46 + len(name)] != name:               # ... and on to config.json's
        at = raw.index(b"PK\x01\x02", at + 4)
    assert raw[at:at + 4] == b"PK\x01\x02"
    size = struct.unpack_from("<L", raw, at + 24)[0]
    struct.pack_into("<L", raw, at + 24, size + change)       # the size the directory declares, too short or long
    assert refused(bytes(raw), scratch, "'my-model/config.json' " + match).count("\n- ") == 1
