"""The browser's kernels (wviz/ui/js/kernels.js) against wviz.attention, the reference: vectors made here by the
library, run through Node.js (tests/js/run_kernels.mjs), agreeing to 1e-9; a refused input gets Python's message."""
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from wviz import attention
from wviz.views import attention_transport as av

RUNNER = Path(__file__).parent / "js" / "run_kernels.mjs"
NODE = shutil.which("node") or "node"   # make test installs Debian's nodejs where it is missing


def run_js(cases: list[dict]) -> list[dict]:
    """Each case {fn, args} run by the JavaScript kernels: {out: [...]} or {error: message}."""
    def plain(a):
        if isinstance(a, torch.Tensor):
            a = a.tolist()
        if isinstance(a, list):
            return [None if x == -math.inf else plain(x) for x in a]
        return a

    text = json.dumps([{"fn": c["fn"], "args": [plain(a) for a in c["args"]]} for c in cases], allow_nan=False)
    done = subprocess.run([NODE, str(RUNNER)], input=text, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def python_message(fn, *args) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args)
    return str(e.value)


def score_vectors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    masked = torch.randn(64, generator=g, dtype=torch.float64)
    masked[[3, 17, 40]] = -math.inf
    return {
        "page defaults": av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS),
        "m = 64": torch.randn(64, generator=g, dtype=torch.float64) * 3,
        "ties": torch.tensor([1.0, 1.0, 1.0, 0.5, 0.5], dtype=torch.float64),
        "masked keys": masked,
        "one key": torch.tensor([0.3], dtype=torch.float64),
        "large scores": torch.tensor([1e8, 1e8 - 1, -1e8], dtype=torch.float64),
    }


TAUS = (1e-6, 1e-3, 0.0316, 1.0, 3.16, 100.0)
ALPHAS = (1.0, 1.05, 1.3, 1.5, 1.75, 2.0)


def test_maps_agree_with_wviz_attention():
    """softmax, sparsemax and entmax at every alpha of the page's slider range, from tau -> 0 to tau = 100."""
    cases, expected = [], []
    for name, s in score_vectors().items():
        for tau in TAUS:
            cases += [{"fn": "softmax", "args": [s, tau]}, {"fn": "sparsemax", "args": [s, tau]}]
            expected += [(name, tau, "softmax", attention.softmax(s, tau)),
                         (name, tau, "sparsemax", attention.sparsemax(s, tau))]
            for alpha in ALPHAS:
                cases.append({"fn": "entmax", "args": [s, alpha, tau]})
                expected.append((name, tau, f"entmax {alpha}", attention.entmax(s, alpha, tau)))
    for (name, tau, what, p), got in zip(expected, run_js(cases)):
        assert "out" in got, (name, tau, what, got)
        assert torch.allclose(torch.tensor(got["out"], dtype=torch.float64), p, atol=1e-9, rtol=0), (name, tau, what)


def test_prior_softmax_agrees_including_zero_prior():
    s = score_vectors()["m = 64"]
    g = torch.Generator().manual_seed(1)
    prior = torch.rand(64, generator=g, dtype=torch.float64)
    prior[[0, 5]] = 0.0
    prior /= prior.sum()
    uniform = torch.full((64,), 1 / 64, dtype=torch.float64)
    cases = [{"fn": "priorSoftmax", "args": [s, pi, tau]} for pi in (prior, uniform) for tau in TAUS]
    want = [attention.prior_softmax(s, pi, tau) for pi in (prior, uniform) for tau in TAUS]
    for got, p in zip(run_js(cases), want):
        assert torch.allclose(torch.tensor(got["out"], dtype=torch.float64), p, atol=1e-9, rtol=0)
        assert (torch.tensor(got["out"])[[0, 5]] == 0).all() or p[0] != 0   # a zero prior gives exactly 0


def test_refused_inputs_get_pythons_message():
    nan = torch.tensor([1.0, math.nan])
    inf = torch.tensor([1.0, math.inf])
    dead = torch.tensor([-math.inf, -math.inf])
    s = torch.tensor([1.0, 2.0], dtype=torch.float64)
    masked_prior = torch.tensor([0.0, 1.0], dtype=torch.float64)
    cases = [
        ({"fn": "softmax", "args": [[1.0, "NaN"], 1.0]}, python_message(attention.softmax, nan, 0.5)),
        ({"fn": "sparsemax", "args": [[1.0, "Infinity"], 1.0]}, python_message(attention.sparsemax, inf)),
        ({"fn": "entmax", "args": [dead, 1.5, 1.0]}, python_message(attention.entmax, dead, 1.5)),
        ({"fn": "priorSoftmax", "args": [[1.0, None], masked_prior, 1.0]},
         python_message(attention.prior_softmax, torch.tensor([1.0, -math.inf], dtype=torch.float64),
                        masked_prior)),
        ({"fn": "entmax", "args": [s, 2.5, 1.0]}, python_message(attention.entmax, s, 2.5)),
        ({"fn": "softmax", "args": [s, 0.0]}, python_message(attention.softmax, s, 0.0)),
    ]
    for got, (_, message) in zip(run_js([c for c, _ in cases]), cases):
        assert got.get("error") == message, (got, message)
