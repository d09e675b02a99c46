"""wviz.vit.checkpoint: exact round trip, and every kind of hostile or broken file refused with its own message."""
import io
import json
import pickle
import random
import struct
import zipfile
from collections import OrderedDict

import pytest
import torch
from safetensors.torch import save as st_save

from wviz.vit.checkpoint import MAX_WEIGHT, check_record, load_checkpoint, save_checkpoint
from wviz.vit.evaluate import predict
from wviz.vit.model import ViTConfig, build_model
from wviz.vit.inspection import inspect_image

CFG = ViTConfig(dim=16, depth=1, heads=2)
RECORD = {"data": "digits", "epochs": 3, "seed": 7, "metrics": {"accuracy": 0.5}, "class_names": list("0123456789")}


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_model(CFG).eval()


@pytest.fixture
def saved(model, tmp_path):
    return save_checkpoint(model, tmp_path / "m.safetensors", RECORD)


def _safetensors(tensors, config=None, record=RECORD):
    config = CFG.to_dict() if config is None else config
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
    with pytest.raises(ValueError, match="refused: it holds objects other than tensors") as refused:
        load_checkpoint(buf.getvalue(), name="evil.pt")
    assert "(`exec`)" in str(refused.value)   # in code quotes: the page's markdown would read __main__ as bold
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
    with pytest.raises(ValueError, match="^truncated safetensors file: its header describes"):
        load_checkpoint(data[:-100], name="t.safetensors")
    with pytest.raises(ValueError, match="^truncated safetensors file, or not a safetensors file: its header needs"):
        load_checkpoint(data[:50], name="t.safetensors")
    with pytest.raises(ValueError, match="shorter than the 8-byte header"):
        load_checkpoint(data[:5], name="t.safetensors")


def test_header_claiming_huge_sizes(saved):
    data = saved.read_bytes()
    with pytest.raises(ValueError, match=r"its header needs 1,099,511,627,776 bytes but only"):
        load_checkpoint(struct.pack("<Q", 2 ** 40) + data[8:], name="h.safetensors")
    n = struct.unpack("<Q", data[:8])[0]
    padded = data[8:8 + n] + b" " * (2 ** 20 + 1 - n)        # a header over the checkpoint's 1 MiB, in the file
    with pytest.raises(ValueError, match=r"^not a valid safetensors file: its header claims 1,048,577 bytes; a "
                                         r"checkpoint's takes at most 1,048,576$"):
        load_checkpoint(struct.pack("<Q", len(padded)) + padded + data[8 + n:], name="h.safetensors")
    header = json.loads(data[8:8 + n])
    key = next(k for k in header if k != "__metadata__")
    header[key]["shape"] = [10 ** 6, 10 ** 6]
    header[key]["data_offsets"] = [0, 4 * 10 ** 12]
    h = json.dumps(header).encode()
    with pytest.raises(ValueError, match="^truncated safetensors file: its header describes 4,000,000,000,000 bytes "
                                         "of tensors, the file has"):
        load_checkpoint(struct.pack("<Q", len(h)) + h + data[8 + n:], name="h.safetensors")
    header[key]["data_offsets"] = [0, 8]
    h = json.dumps(header).encode()
    with pytest.raises(ValueError, match=rf'tensor "{key}" of shape \[1000000, 1000000\] in F32 takes '
                                         "4,000,000,000,000 bytes but its offsets hold 8$"):
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
    with pytest.raises(ValueError, match='tensor "cls" has the dtype "I64"; wviz reads F64, F32, F16, BF16$'):
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
    kb = f"{len(data) / 1024:.1f} kB"
    with pytest.raises(ValueError, match=f"the checkpoint is {kb}, over the limit of 1000 bytes"):
        load_checkpoint(saved, max_bytes=1000)
    with pytest.raises(ValueError, match=r"the checkpoint is 3.0 MB, over the limit of 2.5 MB"):
        load_checkpoint(bytes(3 * 2 ** 20), name="big.pt", max_bytes=5 * 2 ** 19)
    monkeypatch.setenv("WVIZ_MAX_CHECKPOINT_MB", "0.001")  # int(0.001 * 2 ** 20) = 1048 bytes
    with pytest.raises(ValueError, match=f"the checkpoint is {kb}, over the limit of 1.0 kB"):
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


class TensorFromDict:
    """Pickles as torch's allowed tensor rebuild called on an OrderedDict instead of a storage: only allowed
    globals, so torch's restricted unpickler runs it and fails inside with AttributeError (no 'dtype')."""

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, (OrderedDict(), 0, (1,), (1,), False, OrderedDict())


def test_pt_that_breaks_torchs_unpickler_is_a_valueerror(model):
    buf = io.BytesIO()
    torch.save({"config": CFG.to_dict(), "state_dict": {**model.state_dict(), "cls": TensorFromDict()}}, buf)
    with pytest.raises(ValueError, match=r"not a readable .pt checkpoint \(AttributeError: 'collections.Ordered"):
        load_checkpoint(buf.getvalue(), name="broken.pt")


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch warns about the odd pickle protocols it meets
def test_damaged_files_load_or_raise_valueerror_only(model, saved):
    """Seeded fuzz: truncations and random bytes flipped, mostly in the parts that describe the tensors (the
    safetensors header, the pickle of a .pt) and some anywhere. Every variant either loads as a working model or
    raises ValueError; no other exception reaches the page."""
    buf = io.BytesIO()
    torch.save({"config": CFG.to_dict(), "state_dict": model.state_dict(), "record": RECORD}, buf)
    pt = buf.getvalue()
    st = saved.read_bytes()
    # the structure: the safetensors header; in the .pt zip everything before the second entry (data.pkl first)
    st_end = 8 + struct.unpack("<Q", st[:8])[0]
    pt_end = sorted(i.header_offset for i in zipfile.ZipFile(io.BytesIO(pt)).infolist())[1]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # dozens of tiny forward passes: with threads, their start-up dominates
    try:
        _fuzz(st, st_end, pt, pt_end)
    finally:
        torch.set_num_threads(threads)


def _fuzz(st, st_end, pt, pt_end):
    rng = random.Random(0)
    x = torch.rand(2, 1, 16, 16)
    for name, good, end in (("m.safetensors", st, st_end), ("m.pt", pt, pt_end)):
        outcome = {"loaded": 0, "ValueError": 0}
        for i in range(300):
            b = bytearray(good)
            if i % 5 == 0:
                b = b[:rng.randrange(len(b))]
            else:
                hi = len(b) if i % 5 == 4 else end
                for _ in range(rng.randint(1, 4)):
                    b[rng.randrange(hi)] = rng.randrange(256)
            try:
                loaded, record = load_checkpoint(bytes(b), name=name)
            except ValueError:
                outcome["ValueError"] += 1
                continue
            assert check_record(record, loaded.config.n_classes) is record
            logits = loaded(x).logits
            assert logits.shape == (2, loaded.config.n_classes) and bool(torch.isfinite(logits).all())
            outcome["loaded"] += 1
        assert min(outcome.values()) >= 10, (name, outcome)  # both outcomes happen: the fuzz reaches the checks


@pytest.mark.parametrize("record, message", [
    ({"metrics": 0.97}, r"'metrics' must be a JSON object .*, got 0.97"),
    ({"metrics": [0.9, 0.1]}, r"'metrics' must be a JSON object .*, got \[0.9, 0.1\]"),
    ({"metrics": {"accuracy": 97}}, r"metrics 'accuracy' must be a number from 0 to 1, got 97"),
    ({"metrics": {"nll": -1}}, r"metrics 'nll' must be a number >= 0, got -1"),
    ({"metrics": {"auroc": {"noise": {"max-softmax": "high"}}}}, r"metrics 'auroc' must be"),
    ({"metrics": {"corruption_error": [0.1, 0.2]}}, r"metrics 'corruption_error' must be \{corruption: \[5 error"),
    ({"metrics": {"corruption_error": {"blur": [0.1, 0.2]}}}, r"metrics 'corruption_error' must be"),
    ({"metrics": {"corruption_error": {"blur": [0.1, 0.2, 0.3, 0.4, 7]}}}, r"metrics 'corruption_error' must be"),
    ({"metrics": {"corruption_error": {"blur": "bad"}}}, r"metrics 'corruption_error' must be"),
    ({"metrics": {"corruption_auroc": {"blur": [0.5] * 5}}}, r"metrics 'corruption_auroc' must be \{corruption: "
                                                             r"\{score: \[5 numbers"),
    ({"metrics": {"corruption_auroc": {"blur": {"max-softmax": [0.5] * 4}}}}, r"metrics 'corruption_auroc' must be"),
    ({"metrics": {"corruption_auroc": {"blur": {"max-softmax": [0.5, 0.6, 0.7, 0.8, 1.5]}}}},
     r"metrics 'corruption_auroc' must be"),
    ({"eval_samples": 10 ** 7}, r"'eval_samples' must be a whole number from 1 to 4096, got 10000000"),
    ({"eval_samples": 0}, r"'eval_samples' must be a whole number from 1 to 4096"),
    ({"eval_samples": "16"}, r"'eval_samples' must be a whole number from 1 to 4096, got '16'"),
    ({"eval_samples": True}, r"'eval_samples' must be a whole number"),
    ({"processes": 2.5}, r"'processes' must be a whole number from 1"),
    ({"class_names": ["a", "b"]}, r"'class_names' must be a list of 10 names"),
    ({"class_names": list(range(10))}, r"'class_names' must be a list of 10 names"),
    ({"metrics": {"accuracy": float("nan")}}, r"not plain JSON \(it holds NaN"),
    ([1, 2], r"training record is not a JSON object"),
    # what tells the inspector which data the model reads, and where (WVIZ_DATA): no path leads anywhere else
    ({"data": "svhn"}, r"'data' must be one of digits, mnist, cifar10, cifar100, folder, got 'svhn'"),
    ({"data_folder": ".."}, r"'data_folder' must be a folder's name \(no path\), got '..'"),
    ({"data_folder": "../../etc"}, r"'data_folder' must be a folder's name"),
    ({"data_folder": "/home/me/shapes"}, r"'data_folder' must be a folder's name"),
    ({"data_folder": "a\\b"}, r"'data_folder' must be a folder's name"),
    ({"data_folder": "shapes\n"}, r"'data_folder' must be a folder's name"),
    ({"data_folder": ""}, r"'data_folder' must be a folder's name"),
    ({"data_folder": 3}, r"'data_folder' must be a folder's name"),
    ({"channels": 3}, r"'channels' must be the model config's channels \(1\), got 3"),
    ({"channels": 9}, r"'channels' must be a whole number from 1 to 4"),
    ({"image_size": 32}, r"'image_size' must be the model config's image_size \(16\), got 32"),
    ({"image_size": "16"}, r"'image_size' must be a whole number from 4 to 256"),
    ({"class_names": [""] + list("123456789")}, r"'class_names' must be a list of 10 names .*printable"),
    ({"class_names": ["a\nb"] + list("123456789")}, r"'class_names' must be a list of 10 names"),
    # the entries of the retrained pair: the validation split, the prototypes' weight, the terms, the multi-seed numbers
    ({"val_fraction": 0.9}, r"'val_fraction' must be a number from 0 to 0.5, got 0.9"),
    ({"val_fraction": "0.1"}, r"'val_fraction' must be a number"),
    ({"kappa": -1}, r"'kappa' must be a number from 0 to 100"),
    ({"pretrain_term": "evil"}, r"'pretrain_term' must be one of w2, likelihood"),
    ({"eval_seeds": 99}, r"'eval_seeds' must be a whole number from 1 to 16"),
    ({"metrics": {"mc": {"seeds": 2, "accuracy": [0.9], "nll": [0.1, 0.1], "ece": [0.1, 0.1], "auroc": {}}}},
     r"metrics 'mc' must be"),
    ({"metrics": {"mc": {"seeds": 1, "accuracy": [1.5], "nll": [0.1], "ece": [0.1], "auroc": {}}}},
     r"metrics 'mc' must be"),
    ({"metrics": {"mc": {"seeds": 1, "accuracy": [0.9], "nll": [0.1], "ece": [0.1],
                         "auroc": {"noise": {"max-softmax": ["x"]}}}}}, r"metrics 'mc' must be"),
    ({"metrics": {"occlusion_auroc": {"noise": [2.0]}}}, r"metrics 'occlusion_auroc' must be"),
    ({"metrics": {"occlusion_auroc": {"noise": 0.9}}}, r"metrics 'occlusion_auroc' must be"),
    ({"metrics": {"vs_twin": {"ece": [0.1, 0.2], "best_auroc": {}}}}, r"metrics 'vs_twin' must be"),
    ({"metrics": {"vs_twin": {"ece": [0.1, 0.0, 0.2], "best_auroc": {"noise": [0.1, "a", 0.2]}}}},
     r"metrics 'vs_twin' must be"),
])
def test_hostile_training_records_are_refused(model, record, message):
    """The record comes from the file like the weights: wrong types and out-of-range values are a ValueError that
    names the entry, from a .safetensors (JSON metadata) and from a .pt (pickled containers) alike."""
    st = st_save(model.state_dict(), metadata={"wviz_config": json.dumps(CFG.to_dict()),
                                               "wviz_record": json.dumps(record)})  # NaN: json writes NaN
    with pytest.raises(ValueError, match=message):
        load_checkpoint(st, name="r.safetensors")
    buf = io.BytesIO()
    torch.save({"config": CFG.to_dict(), "state_dict": model.state_dict(), "record": record}, buf)
    with pytest.raises(ValueError, match=message):
        load_checkpoint(buf.getvalue(), name="r.pt")


def test_pt_record_or_config_holding_tensors_is_refused(model):
    for obj, message in (({"record": {"metrics": {"accuracy": torch.tensor(0.9)}}}, "record is not plain JSON"),
                         ({"config": {**CFG.to_dict(), "dim": torch.tensor(16)}}, "'config' is not a JSON object"),
                         ({"config": {1: 2}}, "'config' is not a JSON object")):
        buf = io.BytesIO()
        torch.save({"config": CFG.to_dict(), "state_dict": model.state_dict(), **obj}, buf)
        with pytest.raises(ValueError, match=message):
            load_checkpoint(buf.getvalue(), name="r.pt")
    sd = dict(model.state_dict())
    sd[3] = torch.zeros(1)  # a key that is not a string
    buf = io.BytesIO()
    torch.save({"config": CFG.to_dict(), "state_dict": sd}, buf)
    with pytest.raises(ValueError, match="1 weight\\(s\\) the model does not, e.g. 3"):
        load_checkpoint(buf.getvalue(), name="k.pt")


def test_record_written_by_training_passes_the_checks():
    """What evaluate.summary and train.main write (every entry filled) is accepted unchanged; a record from before
    the data's entries (data_folder, channels, image_size) too."""
    record = {"data": "digits", "data_folder": None, "channels": 1, "image_size": 16, "epochs": 40, "seed": 0,
              "lambda": 0.1, "processes": 2, "eval_samples": 16,
              "class_names": [str(i) for i in range(10)], "train_seconds": 152.3,
              "metrics": {"accuracy": 0.99, "nll": 0.03, "ece": 0.015,
                          "auroc": {"uniform noise": {"max-softmax": 0.9, "covariance trace": 0.2}},
                          "corruption_error": {"blur": [0.0, 0.01, 0.03, 0.06, 1.0]},
                          "corruption_auroc": {"blur": {"class spread": [0.5, 0.52, 0.6, 0.8, 1.0]}}}}
    assert check_record(record, 10, (1, 16)) is record
    for key in ("data_folder", "channels", "image_size"):
        del record[key]
    assert check_record(record, 10, (1, 16)) is record
    folder = {"data": "folder", "data_folder": "my shapes (v2)", "channels": 3, "image_size": 32,
              "class_names": ["circle", "square", "triangle"]}
    assert check_record(folder, 3, (3, 32)) is folder


def test_weights_too_large_to_compute_with_are_refused(model):
    """One flipped exponent bit turns a weight into ~1e38: finite, but the forward pass overflows to NaN. The
    loader refuses it; a model built around the loader still gets a ValueError, not NaN, from the page's views."""
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["embed.weight"][0, 0] = 3e38
    with pytest.raises(ValueError, match=r"weight 'embed.weight' holds a value of 3e\+38; trained weights are far"):
        load_checkpoint(_safetensors(sd), name="s.safetensors")
    sd["embed.weight"][0, 0] = MAX_WEIGHT  # the bound itself is accepted
    load_checkpoint(_safetensors(sd), name="s.safetensors")
    # (the stochastic model's W2 attention already refuses NaN means; the deterministic twin would pass NaN on)
    twin = build_model(ViTConfig(kind="deterministic", dim=16, depth=1, heads=2))
    with torch.no_grad():
        twin.embed.weight.fill_(3e38)
    image = torch.rand(1, 16, 16)
    assert not bool(torch.isfinite(twin(image[None]).logits).all())  # the premise: this model outputs NaN
    with pytest.raises(ValueError, match="not a finite number"):
        inspect_image(twin, image, samples=4)
    with pytest.raises(ValueError, match="not a finite number"):
        predict(twin, image[None].repeat(3, 1, 1, 1), samples=2)


def test_a_checkpoint_from_before_the_rule_loads_with_004s_rule_and_eq5(model):
    """A file whose config lacks rule, layer0 and prototypes (every checkpoint written before them) loads as it was
    trained: rule '004', the embeddings' variances of eq. (5); its outputs are those of the model it holds."""
    old = {k: v for k, v in CFG.to_dict().items() if k not in ("rule", "layer0", "prototypes")}
    st = st_save(model.state_dict(), metadata={"wviz_config": json.dumps(old), "wviz_record": "{}"})
    loaded, _ = load_checkpoint(st, name="old.safetensors")
    assert (loaded.config.rule, loaded.config.layer0, loaded.config.prototypes) == ("004", "eq5", 0)
    x = torch.rand(2, 1, 16, 16)
    torch.testing.assert_close(loaded(x).covariances[-1], model.eval()(x, rule="004").covariances[-1])


def test_prototypes_are_weights_of_the_file_and_checked_like_them(tmp_path):
    from wviz.vit.model import fit_prototypes

    cfg = ViTConfig(dim=16, depth=1, heads=2, rule="mixture", layer0="prototypes", prototypes=4)
    torch.manual_seed(0)
    m = build_model(cfg)
    fit_prototypes(m, torch.rand(8, 1, 16, 16), kappa=0.02)
    path = save_checkpoint(m, tmp_path / "p.safetensors", {})
    loaded, _ = load_checkpoint(path)
    assert loaded.config == cfg and torch.equal(loaded.proto, m.proto)
    assert torch.equal(loaded.proto_scale, m.proto_scale)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    state["proto_scale"] = torch.tensor([-5.0])     # a negative scale cannot make a variance negative
    st = st_save(state, metadata={"wviz_config": json.dumps(cfg.to_dict()), "wviz_record": "{}"})
    bad, _ = load_checkpoint(st, name="n.safetensors")
    assert bool((bad(torch.rand(2, 1, 16, 16)).covariances[0] > 0).all())
    del state["proto"]
    with pytest.raises(ValueError, match="lacks 1 weight"):
        load_checkpoint(st_save(state, metadata={"wviz_config": json.dumps(cfg.to_dict())}), name="m.safetensors")
    bad_cfg = {**cfg.to_dict(), "prototypes": 10 ** 6}
    with pytest.raises(ValueError, match="prototypes must be"):
        load_checkpoint(st_save(m.state_dict(), metadata={"wviz_config": json.dumps(bad_cfg)}), name="c.safetensors")
