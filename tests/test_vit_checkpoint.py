"""wviz.vit.checkpoint: exact round trip, and every kind of hostile or broken file refused with its own message."""
import io
import json
import pickle
import struct

import pytest
import torch
from safetensors.torch import save as st_save

from wviz.vit.checkpoint import load_checkpoint, save_checkpoint
from wviz.vit.model import ViTConfig, build_model

CFG = ViTConfig(dim=16, depth=1, heads=2)
RECORD = {"data": "digits", "epochs": 3, "seed": 7, "metrics": {"accuracy": 0.5}, "class_names": list("0123456789")}


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_model(CFG).eval()


@pytest.fixture
def saved(model, tmp_path):
    return save_checkpoint(model, tmp_path / "m.safetensors", RECORD)


def _safetensors(tensors, config=CFG.to_dict(), record=RECORD):
    return st_save(tensors, metadata={"wviz_config": json.dumps(config), "wviz_record": json.dumps(record)})


def test_round_trip_is_exact_from_path_and_bytes(model, saved):
    x = torch.rand(3, 1, 16, 16)
    for source, name in ((saved, None), (saved.read_bytes(), "upload.safetensors"), (saved.read_bytes(), None)):
        loaded, record = load_checkpoint(source, name=name)
        assert record == RECORD and loaded.config == CFG
        for (k, a), (k2, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
            assert k == k2 and torch.equal(a, b)
        assert torch.equal(loaded(x).logits, model(x).logits)


def test_deterministic_model_round_trip(tmp_path):
    m = build_model(ViTConfig(kind="deterministic", dim=16, depth=1, heads=2))
    loaded, _ = load_checkpoint(save_checkpoint(m, tmp_path / "d.safetensors", {}))
    assert type(loaded).__name__ == "DeterministicViT"


def test_pt_with_weights_only_loads(model):
    buf = io.BytesIO()
    torch.save({"config": CFG.to_dict(), "state_dict": model.state_dict(), "record": RECORD}, buf)
    loaded, record = load_checkpoint(buf.getvalue(), name="m.pt")
    assert record == RECORD
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


class Evil:
    """Unpickling this would run exec(...), which writes the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def test_pickle_that_runs_code_is_refused_and_never_runs(model, tmp_path):
    marker = tmp_path / "pwned"
    # 1) inside torch's zip format (.pt)
    buf = io.BytesIO()
    torch.save({"config": CFG.to_dict(), "state_dict": model.state_dict(), "record": Evil(marker)}, buf)
    with pytest.raises(ValueError, match="refused: it holds objects other than tensors"):
        load_checkpoint(buf.getvalue(), name="evil.pt")
    # 2) a bare pickle named .pth
    raw = pickle.dumps({"config": CFG.to_dict(), "state_dict": {}, "x": Evil(marker)}, protocol=2)
    with pytest.raises(ValueError, match="refused|not a readable .pt"):
        load_checkpoint(raw, name="evil.pth")
    # 3) the same bytes on disk, named .safetensors: parsed as a header, never unpickled
    path = tmp_path / "evil.safetensors"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match="safetensors"):
        load_checkpoint(path)
    assert not marker.exists()
    pickle.loads(raw)  # the control: a plain unpickler would have run it
    assert marker.read_text() == "pwned"


def test_truncated_safetensors(saved):
    data = saved.read_bytes()
    with pytest.raises(ValueError, match="truncated safetensors file: tensor"):
        load_checkpoint(data[:-100], name="t.safetensors")
    with pytest.raises(ValueError, match="truncated safetensors file: the header needs"):
        load_checkpoint(data[:50], name="t.safetensors")
    with pytest.raises(ValueError, match="shorter than the 8-byte header"):
        load_checkpoint(data[:5], name="t.safetensors")


def test_header_claiming_huge_sizes(saved):
    data = saved.read_bytes()
    with pytest.raises(ValueError, match=r"header claims 1099511627776 bytes"):
        load_checkpoint(struct.pack("<Q", 2 ** 40) + data[8:], name="h.safetensors")
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    key = next(k for k in header if k != "__metadata__")
    header[key]["shape"] = [10 ** 6, 10 ** 6]
    header[key]["data_offsets"] = [0, 4 * 10 ** 12]
    h = json.dumps(header).encode()
    with pytest.raises(ValueError, match=f"truncated safetensors file: tensor '{key}' needs bytes 0..4000000000000"):
        load_checkpoint(struct.pack("<Q", len(h)) + h + data[8 + n:], name="h.safetensors")
    header[key]["data_offsets"] = [0, 8]
    h = json.dumps(header).encode()
    with pytest.raises(ValueError, match=r"claims shape \[1000000, 1000000\]"):
        load_checkpoint(struct.pack("<Q", len(h)) + h + data[8 + n:], name="h.safetensors")


def test_wrong_shapes_keys_and_values(model):
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    bad = dict(sd, **{"head.weight": torch.zeros(3, 16)})
    with pytest.raises(ValueError, match=r"weight 'head.weight' has shape \(3, 16\); the config needs \(10, 16\)"):
        load_checkpoint(_safetensors(bad), name="s.safetensors")
    missing = {k: v for k, v in sd.items() if k != "cls"}
    with pytest.raises(ValueError, match="lacks 1 weight"):
        load_checkpoint(_safetensors(missing), name="s.safetensors")
    with pytest.raises(ValueError, match="the model does not, e.g. 'extra'"):
        load_checkpoint(_safetensors(dict(sd, extra=torch.zeros(1))), name="s.safetensors")
    nan = dict(sd, cls=torch.full_like(sd["cls"], float("nan")))
    with pytest.raises(ValueError, match="'cls' contains NaN"):
        load_checkpoint(_safetensors(nan), name="s.safetensors")
    ints = dict(sd, cls=torch.zeros(sd["cls"].shape, dtype=torch.int64))
    with pytest.raises(ValueError, match="only float tensors"):
        load_checkpoint(_safetensors(ints), name="s.safetensors")


def test_insane_or_missing_config(model):
    sd = model.state_dict()
    with pytest.raises(ValueError, match="config dim must be an integer from 4 to 1024"):
        load_checkpoint(_safetensors(sd, config={**CFG.to_dict(), "dim": 10 ** 9}), name="s.safetensors")
    with pytest.raises(ValueError, match="no model config"):
        load_checkpoint(st_save(sd), name="s.safetensors")
    with pytest.raises(ValueError, match="must be a JSON object"):
        load_checkpoint(_safetensors(sd, config=[1, 2]), name="s.safetensors")


def test_wrong_extension_empty_and_over_the_cap(saved, tmp_path, monkeypatch):
    data = saved.read_bytes()
    with pytest.raises(ValueError, match=r"unsupported file type '.txt'"):
        load_checkpoint(data, name="weights.txt")
    other = tmp_path / "m.npz"
    other.write_bytes(data)
    with pytest.raises(ValueError, match=r"unsupported file type '.npz'"):
        load_checkpoint(other)
    zipped = io.BytesIO()
    torch.save({"a": torch.zeros(1)}, zipped)
    with pytest.raises(ValueError, match="torch zip archive, not safetensors"):
        load_checkpoint(zipped.getvalue(), name="x.safetensors")
    with pytest.raises(ValueError, match="is empty"):
        load_checkpoint(b"", name="e.safetensors")
    empty = tmp_path / "e.pt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="e.pt is empty"):
        load_checkpoint(empty)
    with pytest.raises(ValueError, match="over the 0.0 MB limit"):
        load_checkpoint(saved, max_bytes=1000)
    monkeypatch.setenv("WVIZ_MAX_CHECKPOINT_MB", "0.001")
    with pytest.raises(ValueError, match="over the 0.0 MB limit"):
        load_checkpoint(data, name="m.safetensors")
    with pytest.raises(ValueError, match="no checkpoint file"):
        load_checkpoint(tmp_path / "nope.safetensors")


def test_garbage_pt_is_refused():
    with pytest.raises(ValueError, match="not a readable .pt checkpoint"):
        load_checkpoint(b"PK\x03\x04 this is not a zip", name="g.pt")
    buf = io.BytesIO()
    torch.save([1, 2, 3], buf)
    with pytest.raises(ValueError, match="must be a dict with 'config' and 'state_dict'"):
        load_checkpoint(buf.getvalue(), name="l.pt")
