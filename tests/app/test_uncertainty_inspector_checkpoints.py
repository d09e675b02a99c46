"""The "Uncertainty inspector" page with every kind of checkpoint (trained here for a few steps by
`python -m wviz.vit.train`) and every image source: it works, or one sentence says what to change."""
import io

import numpy as np
import pytest
from PIL import Image

from tests.app.conftest import figure_titled, figures, no_exception, settle, shown_text
from tests.app.inspector import PAGE
from wviz.views import uncertainty_inspector as views
from wviz.vit import mnist


def _cifar_folder(root) -> list[str]:
    """A CIFAR-10 "python version" folder of 4 images per batch and 4 classes (its own names), as the official one is
    laid out (cifar-10-batches-py/data_batch_1..5, test_batch, batches.meta)."""
    import pickle

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 3]}
        (folder / name).write_bytes(pickle.dumps(batch))
    names = ["plane", "car", "bird", "cat"]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [n.encode() for n in names]}))
    return names


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Tiny checkpoints trained for one epoch of a few images by `python -m wviz.vit.train` itself: on the digits,
    on MNIST, on a folder of shapes (stochastic and deterministic), on a CIFAR-10 folder; and where their data lies."""
    from wviz.vit import shapes, train

    tmp = tmp_path_factory.mktemp("own")
    shapes_root = shapes.write_folder(tmp / "data" / "shapes", train=2, test=2)
    cifar_names = _cifar_folder(tmp / "cifar")
    tiny = ["--epochs", "1", "--dim", "8", "--depth", "1", "--heads", "2", "--no-eval", "--no-progress", "--threads",
            "1", "--batch", "8"]
    runs = {"digits": ["--data", "digits", "--limit", "16"],
            "mnist": ["--data", "mnist", "--limit", "16", "--eval-samples", "2"],   # S = 2: 41 passes of 1,000
            "folder": ["--data", "folder", "--data-root", str(shapes_root), "--patch", "8"],
            "deterministic": ["--data", "folder", "--data-root", str(shapes_root), "--patch", "8", "--kind",
                              "deterministic"],
            "cifar": ["--data", "cifar10", "--data-root", str(tmp / "cifar"), "--patch", "8", "--limit", "8"]}
    files = {}
    for name, args in runs.items():
        out = tmp / f"{name}.safetensors"
        train.main(args + tiny + ["--out", str(out)])
        files[name] = out.read_bytes()
    return {"files": files, "data": tmp / "data", "cifar": tmp / "cifar", "cifar_names": cifar_names,
            "shapes": list(shapes.CLASSES)}


def _picture() -> bytes:
    from wviz.vit import shapes

    buf = io.BytesIO()
    Image.fromarray(shapes.draw("square", 48, np.random.default_rng(5))).save(buf, "PNG")
    return buf.getvalue()


def _open_with(open_page, raw: bytes | None, source: str):
    """The page with checkpoint ``raw`` uploaded (None: the bundled demo) and the image source chosen (an upload:
    a picture of a square)."""
    at = open_page(PAGE, img_src=source)
    if raw is not None:
        at.sidebar.radio(key="ckpt").set_value("upload").run()
        at.sidebar.file_uploader(key="ckpt_file").upload("mine.safetensors", raw).run()
    if source == "upload":
        at.sidebar.file_uploader(key="img_file").upload("square.png", _picture(), "image/png").run()
    no_exception(at)
    return settle(at)


COMBINATIONS = [(ckpt, source) for ckpt in ("bundled", "digits", "mnist", "folder", "cifar", "deterministic")
                for source in ("test set", "upload")]


@pytest.mark.parametrize("ckpt, source", COMBINATIONS, ids=[f"{c}-{s}" for c, s in COMBINATIONS])
def test_every_checkpoint_with_every_image_source_works_or_says_what_to_change(open_page, monkeypatch, trained,
                                                                              ckpt, source):
    """WVIZ_DATA names the folder that holds the shapes, not CIFAR's: the folder checkpoints show their own test
    split (its class names, the dataset panel), the CIFAR one says in one sentence how to give its data and still
    reads an uploaded picture; an MNIST checkpoint (the bundled pair's, or one trained here) shows MNIST's test split
    with its own OOD sets and corruptions (shipped: WVIZ_DATA plays no part), beside MNIST's twin; no traceback, no
    error, anywhere."""
    monkeypatch.setenv("WVIZ_DATA", str(trained["data"]))
    at = _open_with(open_page, None if ckpt == "bundled" else trained["files"][ckpt], source)
    assert not at.error, [shown_text(e) for e in at.error]
    titles = [f["layout"]["title"]["text"] for f in figures(at)]
    shipped = {"bundled": "mnist", "digits": "digits", "mnist": "mnist"}.get(ckpt)   # handwritten digits
    digits = shipped is not None
    names = [str(i) for i in range(10)] if digits else trained["cifar_names"] if ckpt == "cifar" else \
        trained["shapes"]
    if ckpt == "cifar" and source == "test set":                     # nothing to inspect: one sentence says why
        assert titles == [] and [shown_text(i) for i in at.info] == [
            "This checkpoint was trained on CIFAR-10: start the app with WVIZ_DATA naming a folder that holds "
            f"cifar-10-batches-py (the official python version) (now WVIZ_DATA={trained['data']}), several folders "
            "separated by ':' as in PATH, or upload a .zip of its test/<class>/ folders in the sidebar."]
        return
    probs = figure_titled(at, "Class probabilities")
    assert [list(t["x"]) for t in probs["data"]][0] == names
    assert len(probs["data"]) == (2 if digits else 1)   # the twin of its shipped dataset beside a digits model
    if source == "test set":
        truth = next(shown_text(m) for m in at.markdown if shown_text(m).startswith("True class"))
        first = {"mnist": str(int(mnist.load("test")[1][0])), "digits": "6"}.get(shipped, names[0])
        assert truth.split("**")[1] == first   # the split's image 0
    else:
        steps = [a["text"] for a in figure_titled(at, "Preprocessing of the uploaded image")["layout"]["annotations"]]
        colour = "grey" if digits else "RGB"
        assert steps[0] == f"upload, {colour}, square"
        assert any(("stays in colour" in shown_text(c)) == (colour == "RGB") for c in at.caption if "What the model" in
                   c.value)
    if ckpt == "cifar":                                              # the upload inspected, the panel needs the data
        assert "Reliability diagram" not in " ".join(titles)
        assert any(shown_text(i).startswith("This checkpoint was trained on CIFAR-10") for i in at.info)
        return
    split = {"mnist": "MNIST test split", "digits": "digits test split"}.get(shipped, "test split")
    figure_titled(at, "OOD score 'max-softmax'")                     # the panel's default view
    if shipped == "mnist":
        assert at.selectbox(key="ood").options == list(mnist.NEAR + mnist.FAR)
        if source == "test set":
            assert at.sidebar.number_input(key="index").max == 1000   # the 1,000 test digits
        at.segmented_control(key="panel").set_value("Corruptions").run()
        curves = figure_titled(at, "Test error under corruption")
        assert sorted(t["name"] for t in curves["data"]) == sorted(f"{model}: {kind}" for kind in mnist.CORRUPTIONS
                                                                   for model in {t["name"] for t in probs["data"]})
    at.segmented_control(key="panel").set_value("Confusion").run()
    conf = figure_titled(at, f"Confusion matrix on the {split}")
    assert [list(t["y"]) for t in conf["data"]][0] == names
    assert ("covariance trace" in at.selectbox(key="score").options) == (ckpt != "deterministic")


def test_cifar_found_through_wviz_data_and_a_folder_checkpoint_given_its_zip(open_page, monkeypatch, trained):
    """WVIZ_DATA naming the folder that holds cifar-10-batches-py: the CIFAR checkpoint's test split, with the
    names of batches.meta. Without WVIZ_DATA the folder checkpoint offers the .zip uploader: a hostile zip is refused
    with its message, the example zip (the shapes' test split) gives the test split and the dataset panel."""
    from wviz.vit import shapes

    monkeypatch.setenv("WVIZ_DATA", f"{trained['data']}:{trained['cifar'] / 'cifar-10-batches-py'}")
    at = _open_with(open_page, trained["files"]["cifar"], "test set")
    assert not at.error and not at.info, [shown_text(e) for e in at.error]
    assert any("CIFAR-10 found through WVIZ_DATA" in shown_text(c) for c in at.sidebar.caption)
    at.segmented_control(key="panel").set_value("Confusion").run()
    assert list(figure_titled(at, "Confusion matrix")["data"][0]["x"]) == trained["cifar_names"]
    assert at.sidebar.number_input(key="index").max == 4                # the 4 images of test_batch

    monkeypatch.delenv("WVIZ_DATA")
    at = _open_with(open_page, trained["files"]["folder"], "test set")
    (note,) = [shown_text(i) for i in at.info]
    assert note.startswith("This checkpoint was trained on the folder 'shapes' (its test/<class>/ images): start the "
                           "app with WVIZ_DATA naming the folder that holds 'shapes'")
    assert "Example test images" in [b.proto.label for b in at.sidebar.get("download_button")]
    evil = io.BytesIO()
    with __import__("zipfile").ZipFile(evil, "w") as z:
        z.writestr("../../escape.png", b"x")
    at.sidebar.file_uploader(key="test_zip").upload("evil.zip", evil.getvalue(), "application/zip").run()
    no_exception(at)
    assert any("'../../escape.png' leads outside the zip's folder" in shown_text(e) for e in at.error)
    at.sidebar.file_uploader(key="test_zip").set_value(("shapes_test.zip", views.example_test_zip(),
                                                        "application/zip")).run()
    settle(at)
    no_exception(at)
    assert not at.error and not at.info, [shown_text(e) for e in at.error]
    assert at.sidebar.number_input(key="index").max == 3 * 20
    at.segmented_control(key="panel").set_value("Confusion").run()
    conf = np.asarray(figure_titled(at, "Confusion matrix on the test split")["data"][0]["z"], dtype=int)
    assert conf.sum(1).tolist() == [20, 20, 20] and list(shapes.CLASSES) == trained["shapes"]
