"""The "Uncertainty inspector" page's dataset panel with the bundled checkpoints: its numbers are the models' own,
re-evaluated here or read from their records, and each shared figure is that of its own state."""
import numpy as np

from tests.app.conftest import check_views, figure_titled, no_exception, settle
from tests.app.inspector import DIGITS, PAGE, bundled_models
from wviz.views import uncertainty_inspector as views
from wviz.vit import data
from wviz.vit import evaluate as vit_evaluate


def test_dataset_panel_agrees_with_the_training_record(open_page):
    """The panel evaluates each model at S = min(its record's S, MAX_PANEL_SAMPLES): the twin's numbers are its
    record's, the stochastic model's (recorded at S = 128) those of a re-evaluation at the panel's S; the corruption
    curves and their AUROCs come from the records."""
    at = open_page(PAGE, **DIGITS, panel="Reliability")
    models = bundled_models()
    x, y = data.load_dataset("digits", "test")
    crops = "sample-image crops"  # the one OOD set whose AUROC is checked below
    expected, probs = {}, {}
    for kind, (model, rec) in models.items():
        samples = min(rec["eval_samples"], views.MAX_PANEL_SAMPLES)
        report = vit_evaluate.evaluate(model, x, y, {crops: data.ood_set(crops, len(x))}, samples=samples,
                                       corruptions=())
        expected[kind], probs[kind] = vit_evaluate.summary(report), report.probs
        if samples == rec["eval_samples"]:
            assert abs(expected[kind]["ece"] - rec["metrics"]["ece"]) < 1e-3 and \
                expected[kind]["accuracy"] == rec["metrics"]["accuracy"]
    assert {k: min(r["eval_samples"], views.MAX_PANEL_SAMPLES) for k, (_, r) in models.items()} == {
        "stochastic": 32, "deterministic": 16}
    rel = figure_titled(at, "Reliability diagram")
    accuracy = [t for t in rel["data"] if "ECE" in t.get("name", "")]
    counts = {t["name"].split(":")[0]: np.asarray(t["y"], dtype=float) for t in rel["data"] if t["yaxis"] == "y2"}
    assert len(accuracy) == 2 and set(counts) == {"stochastic", "deterministic"}
    for t in accuracy:
        kind = t["name"].split(" ")[0]
        ece_shown = float(t["name"].split("ECE ")[1].rstrip(")"))
        assert abs(ece_shown - expected[kind]["ece"]) < 1e-3
        count, conf = np.asarray(t["customdata"], dtype=float).T
        acc = np.asarray(t["y"], dtype=float)
        assert count.sum() == 360 and count.min() >= 1                   # empty bins left out
        np.testing.assert_array_equal(counts[kind], count)               # the counts drawn below the bars
        assert abs((count / 360 * np.abs(acc - conf)).sum() - expected[kind]["ece"]) < 1e-3
    at.segmented_control(key="panel").set_value("OOD scores").run()
    ood = figure_titled(at, "OOD score 'max-softmax'")
    titles = [a["text"] for a in ood["layout"]["annotations"]]
    for kind in models:
        shown = float(next(s for s in titles if s.startswith(kind)).split("AUROC ")[1])
        assert abs(shown - expected[kind]["auroc"][crops]["max-softmax"]) < 1e-3
    # the confusion matrices: each model's (true, predicted) pairs on the 360 test digits, counted one by one
    at.segmented_control(key="panel").set_value("Confusion").run()
    confusion = {t["name"]: np.asarray(t["z"], dtype=int) for t in figure_titled(at, "Confusion matrix")["data"]}
    assert set(confusion) == {"stochastic", "deterministic"}
    for kind in models:
        guesses = probs[kind].argmax(1).tolist()
        counts = np.zeros((10, 10), dtype=int)
        for truth, guess in zip(y.tolist(), guesses):
            counts[truth, guess] += 1
        np.testing.assert_array_equal(confusion[kind], counts)
        assert abs(np.trace(counts) / 360 - expected[kind]["accuracy"]) < 1e-4
    at.segmented_control(key="panel").set_value("Corruptions").run()
    curves = figure_titled(at, "Test error under corruption")
    assert len(curves["data"]) == 6
    seen = figure_titled(at, "Does 'max-softmax' see the corruption?")
    assert len(seen["data"]) == 6
    for t in seen["data"]:
        kind, corruption = t["name"].split(": ")
        np.testing.assert_allclose(np.asarray(t["y"], dtype=float),
                                   models[kind][1]["metrics"]["corruption_auroc"][corruption]["max-softmax"])
    no_exception(at)
    check_views(at, "panel", {"OOD scores": ["vit_ood"], "Corruptions": ["vit_corruption", "vit_corruption_auroc"],
                              "Reliability": ["vit_reliability"], "Confusion": ["vit_confusion"],
                              "Temperature scaling": ["vit_temperature"], "Risk-coverage": ["vit_risk"],
                              "Conformal sets": ["vit_conformal"]})
    at.segmented_control(key="panel").set_value("Temperature scaling").run()
    temperature = figure_titled(at, "Temperature scaling")   # a row per model: before and after, ECE in each title
    titles = [a["text"] for a in temperature["layout"]["annotations"]]
    assert [t.split(", ")[0] for t in titles] == ["stochastic", "stochastic", "deterministic", "deterministic"]
    assert all("ECE 0." in t for t in titles) and titles[2].startswith("deterministic, before<br>τ = 1: ECE")
    # risk-coverage: each model's perfect score in grey, 0 until its E errors must be kept, then (E - (N - k)) / k,
    # under each of the model's scores, which all end at the model's error rate
    at.segmented_control(key="panel").set_value("Risk-coverage").run()
    risk = figure_titled(at, "Risk against coverage")
    for kind in models:
        curves = {t["name"].split(": ")[1].split(" (AURC")[0]: t for t in risk["data"] if t["name"].startswith(kind)}
        best = curves.pop("a perfect score")
        assert best["line"]["color"] == "grey" and len(curves) >= 2
        ends = {round(float(np.asarray(t["y"], dtype=float)[-1]) * 360) for t in curves.values()}
        assert len(ends) == 1
        k = np.arange(1, 361)
        np.testing.assert_allclose(np.asarray(best["y"], dtype=float), np.maximum(0, ends.pop() - (360 - k)) / k)
        assert all((np.asarray(best["y"], dtype=float) <= np.asarray(t["y"], dtype=float) + 1e-12).all()
                   for t in curves.values())


# Each state differs from the defaults in what one or two shared figures are drawn from, and draws the views that
# hold the others (the attention view, the panel's and the calibration's).
SHARED_STATES = [{}, {"layer": "2", "view": "Heads and rollout"}, {"head": "2", "view": "Deterministic twin"},
                 {"query": "patch 5 (row 2, col 1)", "panel": "Corruptions"},
                 {"region": "occlude", "panel": "Reliability"},
                 {"region": "noise", "region_strength": "0.3", "panel": "Risk-coverage"},
                 {"samples": "8", "panel": "Conformal sets"}, {"seed": "3", "panel": "Confusion"}, {"index": "2"},
                 {"score": "mutual information", "panel": "Corruptions"}, {"ood": "uniform noise"}]


def test_shared_figures_are_those_of_their_own_state(open_page):
    """The figures built once per server (ui.shared_figure) are the ones each state draws: every state opened after
    the others (the figures of the defaults already built) draws what it draws with none built before."""
    from wviz.ui.output import _shared

    def specs(at) -> list[str]:   # the figures as the browser gets them
        return [el.proto.spec for el in at.get("plotly_chart")]

    after_others = [specs(settle(open_page(PAGE, **DIGITS, **q))) for q in SHARED_STATES]
    assert all(seen != after_others[0] for seen in after_others[1:])   # each state's parameters took effect
    for q, seen in zip(SHARED_STATES, after_others):
        _shared.clear()
        assert specs(settle(open_page(PAGE, **DIGITS, **q))) == seen, q


def test_a_link_to_a_calibration_view_keeps_it_while_the_calibration_runs(monkeypatch):
    """A shared link to a calibration view, opened while the calibration is computed (a server's first visit):
    the selector keeps the link's view, which says what it waits for, and draws it once the calibration is done
    (with no such view among the choices the selector fell back to its first for good)."""
    import threading
    import time

    from streamlit.testing.v1 import AppTest

    from tests.app.conftest import ROOT

    gate, calibrate = threading.Event(), views.calibrate_panel
    monkeypatch.setattr(views, "calibrate_panel",
                        lambda job, progress=None: gate.wait(120) and calibrate(job, progress))
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    at = AppTest.from_file(str(ROOT / "pages" / PAGE), default_timeout=120)
    for k, v in {**DIGITS, "panel": "Risk-coverage"}.items():
        at.query_params[k] = v
    deadline = time.time() + 300
    while not any(p.proto.text.startswith("Calibrating") for p in at.get("progress")) and time.time() < deadline:
        at.run()   # until the panel's evaluation is done and the calibration is what it waits for
        time.sleep(0.2)
    no_exception(at)
    assert at.segmented_control(key="panel").value == "Risk-coverage"
    assert any("once the calibration" in i.value for i in at.info)
    gate.set()
    settle(at)
    assert at.segmented_control(key="panel").value == "Risk-coverage"
    figure_titled(at, "Risk against coverage")
