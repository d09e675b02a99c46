"""The "Uncertainty inspector" page with an uploaded checkpoint: bad uploads end in a plain error (a pickle that
would run code must not run), a good one replaces the bundled model and its dataset panel is measured here."""
import io

import numpy as np
import pytest
import torch

from tests.app.conftest import figure_titled, figures, no_exception, settle, shown_text
from tests.app.inspector import PAGE, tiny_upload
from wviz.views import uncertainty_inspector as views
from wviz.vit import data
from wviz.vit import evaluate as vit_evaluate
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.model import mc_predict


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def demo_still_shown(at) -> None:
    """The page goes on with the bundled demo: both bundled models' class probabilities and the panels below."""
    bars = {t["name"] for t in figure_titled(at, "Class probabilities")["data"]}
    assert bars == {"stochastic", "deterministic"}
    figure_titled(at, "Attention of the query (red)")
    assert any("bundled demo" in shown_text(i) for i in at.info)
    # its dataset panel is not measured: that time goes to the upload's own (no panel selector, no progress bar)
    assert any("dataset panel measures the uploaded checkpoint" in shown_text(i) for i in at.info)
    assert not at.get("progress") and "score" not in [s.key for s in at.selectbox]


def test_bad_uploads_show_plain_errors(open_page, tmp_path):
    """Every refused file: its name, what is wrong with it and what a valid checkpoint is, while the page goes on
    with the bundled demo (it used to blank the page below the error)."""
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    assert not at.error and any("Upload a checkpoint" in shown_text(i) for i in at.info)
    demo_still_shown(at)
    labels = [b.proto.label for b in at.sidebar.get("download_button")]
    assert "Example checkpoint" in labels
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"config": {}, "state_dict": {}, "record": Evil(marker)}, buf)
    at.sidebar.file_uploader(key="ckpt_file").upload("evil.pt", buf.getvalue()).run()
    no_exception(at)
    assert any("'evil.pt' was not used" in shown_text(e) and "refused" in shown_text(e)
               and views.VALID_CHECKPOINT in shown_text(e) for e in at.error), [shown_text(e) for e in at.error]
    assert not marker.exists()
    demo_still_shown(at)
    at.sidebar.file_uploader(key="ckpt_file").set_value(("notes.txt", b"hello", "text/plain")).run()
    assert any("unsupported file type '.txt'" in shown_text(e) for e in at.error)
    good = views.BUNDLED["digits"]["stochastic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").set_value(("cut.safetensors", good[:len(good) // 2],
                                                          "application/octet-stream")).run()
    no_exception(at)
    assert any("truncated safetensors file" in shown_text(e) for e in at.error)
    demo_still_shown(at)


def test_uploaded_checkpoints_replace_the_bundled_model(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    raw = views.BUNDLED["digits"]["stochastic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").upload("mine.safetensors", raw).run()
    no_exception(at)
    assert not at.error
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
    assert set(bars) == {"uploaded (stochastic)", "deterministic"}
    x, _ = data.load_dataset("digits", "test")
    ref = mc_predict(load_checkpoint(raw, name="m.safetensors")[0], x[:1], samples=32, seed=0).mean[0].numpy()
    np.testing.assert_allclose(bars["uploaded (stochastic)"], ref, atol=1e-6)
    # a deterministic upload: no covariance views, no covariance-trace score
    raw = views.BUNDLED["digits"]["deterministic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").set_value(("twin.safetensors", raw, "application/octet-stream")).run()
    no_exception(at)
    assert any("no covariances" in shown_text(i) for i in at.info)
    assert "covariance trace" not in at.selectbox(key="score").options


def test_upload_with_another_patch_size_high_query_and_measured_panel(open_page, tmp_path, monkeypatch):
    """patch_size 2: 64 patches + the class token, while the twin has 16 + 1. A query patch the twin does not have
    draws no twin attention (it used to raise IndexError); the panel's corruption curves for the upload are
    measured by the page (the file's claim of zero error is ignored), and evaluate moves the progress bar."""
    claimed = {k: [0.0] * 5 for k in data.CORRUPTIONS}
    raw = tiny_upload(tmp_path, {"eval_samples": 2, "metrics": {"corruption_error": claimed}}, patch_size=2)
    calls = []  # each evaluation of this upload the page runs: its progress fractions and its Report
    real = vit_evaluate.evaluate

    def spy(model, *args, progress=None, **kwargs):
        if model.config.patch_size != 2:  # another test's job, still running in the background worker
            return real(model, *args, progress=progress, **kwargs)
        calls.append(([], None))

        def report(f, text):
            calls[-1][0].append(f)
            progress(f, text)
        result = real(model, *args, progress=report, **kwargs)
        calls[-1] = (calls[-1][0], result)
        return result

    monkeypatch.setattr(vit_evaluate, "evaluate", spy)
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    at.sidebar.file_uploader(key="ckpt_file").upload("p2.safetensors", raw).run()
    at.selectbox(key="query").set_value(40).run()
    no_exception(at)
    settle(at)  # the dataset panel is evaluated in the background (ui.background)
    assert not at.error, [shown_text(e) for e in at.error]
    assert any("4 x 4 patches, this model into 8 x 8" in shown_text(i) for i in at.info)
    assert not [f for f in figures(at) if f["layout"]["title"]["text"].startswith("deterministic twin")]
    assert "Deterministic twin" not in at.segmented_control(key="view").options
    model = load_checkpoint(raw, name="p2.safetensors")[0]
    out = model(data.load_dataset("digits", "test")[0][:1])
    at.segmented_control(key="view").set_value("Heads and rollout").run()
    heads = figure_titled(at, "uploaded (stochastic): attention")["data"]
    for h in range(2):
        np.testing.assert_allclose(np.asarray(heads[h]["z"], dtype=float),
                                   out.attentions[0][0, h, 40, 1:].reshape(8, 8).detach().numpy(), atol=1e-6)
    # the upload's evaluation (the only one with corruptions): 20 passes (test split, 3 OOD sets and the held-out
    # letters, 3 corruptions x 5 severities) reported as they start, then 1.0; the panel shows what it measured
    # (wviz.vit.evaluate itself is tested against its definitions in tests/test_vit_*.py)
    ((fractions, report),) = [c for c in calls if len(c[0]) > 4]
    assert fractions == [i / 20 for i in range(20)] + [1.0]
    measured = report.corruption
    at.segmented_control(key="panel").set_value("Corruptions").run()
    shown = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Test error under corr")["data"]}
    for kind, err in measured.items():
        np.testing.assert_allclose(shown[f"uploaded (stochastic): {kind}"], err.numpy(), atol=1e-6)
    assert any(shown[f"uploaded (stochastic): {k}"].max() > 0 for k in measured)  # not the file's zeros
    # the score's AUROC per corruption: the upload's measured here, the twin's from its record
    seen = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Does 'max-softmax' see")["data"]}
    assert len(seen) == 6
    for kind, per in report.corruption_auroc.items():
        np.testing.assert_allclose(seen[f"uploaded (stochastic): {kind}"], per["max-softmax"].numpy(), atol=1e-6)
    assert any("uploaded (stochastic): measured here" in shown_text(c) for c in at.caption)


@pytest.mark.parametrize("record, message", [
    ({"metrics": 0.97}, "training record: 'metrics' must be a JSON object"),
    ({"metrics": [0.9, 0.1]}, "training record: 'metrics' must be a JSON object"),
    ({"metrics": {"corruption_error": {"blur": "high"}}}, "metrics 'corruption_error' must be"),
    ({"metrics": {"corruption_error": [[0.1] * 5]}}, "metrics 'corruption_error' must be"),
    ({"eval_samples": 10 ** 7}, "'eval_samples' must be a whole number from 1 to 4096"),
    ({"class_names": "0123456789"}, "'class_names' must be a list of 10 names"),
])
def test_hostile_training_records_show_a_plain_error(open_page, tmp_path, record, message):
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    at.sidebar.file_uploader(key="ckpt_file").upload("hostile.safetensors", tiny_upload(tmp_path, record)).run()
    no_exception(at)
    assert any(message in shown_text(e) for e in at.error), [shown_text(e) for e in at.error]


def test_huge_eval_samples_are_capped_with_a_caption(open_page, tmp_path):
    raw = tiny_upload(tmp_path, {"eval_samples": 4096}, kind="deterministic")
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    at.sidebar.file_uploader(key="ckpt_file").upload("many.safetensors", raw).run()
    no_exception(at)
    settle(at)
    assert not at.error
    assert any(f"asks for 4096 Monte-Carlo samples per image; the panel uses {views.MAX_PANEL_SAMPLES}" in c.value
               for c in at.caption)
    figure_titled(at, "OOD score")  # the panel ran
