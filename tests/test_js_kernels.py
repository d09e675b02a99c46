"""The browser's kernels (wviz/ui/js/kernels.js) against wviz, the reference: vectors made here by the library, run
through Node.js (tests/js/run_kernels.mjs), agreeing to 1e-9 (wviz.attention's maps) or, where both iterate
(wviz.ot.sinkhorn), each meeting the marginals to the solvers' tolerance; a refused input gets Python's message."""
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from wviz import attention, ot
from wviz.views import attention_transport as av
from wviz.views import transport_plans as tv

RUNNER = Path(__file__).parent / "js" / "run_kernels.mjs"
NODE = shutil.which("node") or "node"   # make test installs Debian's nodejs where it is missing


def run_js(cases: list[dict]) -> list[dict]:
    """Each case {fn, args} run by the JavaScript kernels: {out: [...]} or {error: message}."""
    def plain(a):
        if isinstance(a, torch.Tensor):
            a = a.tolist()
        if isinstance(a, dict):
            return {k: plain(v) for k, v in a.items()}
        if isinstance(a, (list, tuple)):
            return [plain(x) for x in a]
        if isinstance(a, float) and math.isinf(a):
            return "Infinity" if a > 0 else None
        return a

    text = json.dumps([{"fn": c["fn"], "args": [plain(a) for a in c["args"]]} for c in cases], allow_nan=False)
    done = subprocess.run([NODE, str(RUNNER)], input=text, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def python_message(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args, **kwargs)
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


def plan_problems() -> dict[str, tuple]:
    """(a, b, C) of Transport plans' default clouds, of two 64-point clouds, with masses 0 on some points, and with
    every cost equal (ties: the plan is a b^T)."""
    page = tv.clouds_from_table(tv.points_table(tv.PRESETS[0], *tv.DEFAULT_SIZES, 0), tv.COST_KINDS[0])
    big = tv.clouds_from_table(tv.points_table("two clusters", 64, 64, 1), "euclidean")
    a, b = big.a.copy(), big.b.copy()
    a[[0, 9]], b[[3]] = 0.0, 0.0
    return {"page defaults": (page.a, page.b, page.C), "n = m = 64": (big.a, big.b, big.C),
            "zero masses": (a / a.sum(), b / b.sum(), big.C),
            "ties": (page.a, page.b, torch.zeros(page.C.shape, dtype=torch.float64))}


def test_sinkhorn_warm_started_meets_the_marginals_at_wviz_plan():
    """The browser's Sinkhorn, warm-started as a drag does (from wviz's potentials at the slider's previous
    value, 1.21 times gamma: two steps of the page's grid), from gamma = 1e-4 max C to 10 max C: its plan meets both
    marginals to 1e-6 (measured here, not as it reports) and agrees with wviz.ot.sinkhorn's (also within 1e-6 of
    its marginals) entry by entry to twice that tolerance, with exact zeros where a mass is 0 and a b^T on ties."""
    cases, expected = [], []
    for name, (a, b, C) in plan_problems().items():
        a, b, C = (torch.as_tensor(x, dtype=torch.float64) for x in (a, b, C))
        unit = float(C.abs().max()) or 1.0
        for gamma_rel in (1e-4, 1e-2, 10.0):
            before = ot.sinkhorn(a, b, C, 1.21 * gamma_rel * unit)
            cases.append({"fn": "sinkhorn", "args": [a, b, C, gamma_rel * unit,
                                                     {"f": before.f, "g": before.g, "tol": tv.TOL}]})
            expected.append((name, gamma_rel, a, b, ot.sinkhorn(a, b, C, gamma_rel * unit).plan))
    for (name, gamma_rel, a, b, want), got in zip(expected, run_js(cases)):
        P = torch.tensor(got["out"]["plan"], dtype=torch.float64)
        assert got["out"]["converged"], (name, gamma_rel, got["out"]["error"])
        error = ot.marginal_error(a, b, P.sum(1), P.sum(0))
        assert error <= tv.TOL, (name, gamma_rel, float(error))
        assert (P - want).abs().max() <= 2 * tv.TOL, (name, gamma_rel, float((P - want).abs().max()))
        assert (P[a == 0] == 0).all() and (P[:, b == 0] == 0).all()
        if name == "ties":
            assert torch.allclose(P, a[:, None] * b[None, :], atol=1e-12, rtol=0)


def test_sinkhorn_within_a_budget_goes_on_where_it_stopped():
    """A frame's budget spent, the kernel returns its potentials unconverged; solving on from them reaches the
    plan a solve without a budget reaches (the next frames of a drag)."""
    a, b, C = (torch.as_tensor(x, dtype=torch.float64) for x in plan_problems()["page defaults"])
    gamma, far = 1e-4 * float(C.max()), ot.sinkhorn(a, b, C, 1.0 * float(C.max()))
    start = {"f": far.f, "g": far.g, "tol": tv.TOL}
    first, whole = run_js([{"fn": "sinkhorn", "args": [a, b, C, gamma, {**start, "budget": 0}]},
                           {"fn": "sinkhorn", "args": [a, b, C, gamma, start]}])
    assert not first["out"]["converged"] and first["out"]["iterations"] < whole["out"]["iterations"]
    again = run_js([{"fn": "sinkhorn", "args": [a, b, C, gamma, {"f": first["out"]["f"], "g": first["out"]["g"],
                                                                 "tol": tv.TOL}]}])[0]["out"]
    assert again["converged"]
    P, want = (torch.tensor(r["plan"], dtype=torch.float64) for r in (again, whole["out"]))
    assert (P - want).abs().max() <= 1e-6


def test_sinkhorn_refuses_what_wviz_ot_refuses_with_its_message():
    a = b = torch.full((2,), 0.5, dtype=torch.float64)
    C = torch.tensor([[0.0, 1.0], [math.nan, 0.0]], dtype=torch.float64)
    good = {"f": [0.0, 0.0], "g": [0.0, 0.0]}
    cases = [
        ({"fn": "sinkhorn", "args": [a, b, [[0.0, 1.0], ["NaN", 0.0]], 0.1, good]},
         python_message(ot.sinkhorn, a, b, C, 0.1)),
        ({"fn": "sinkhorn", "args": [a, b, [[0.0, 1.0], [1.0, 0.0]], 0.0, good]},
         python_message(ot.sinkhorn, a, b, torch.eye(2, dtype=torch.float64), 0.0)),
    ]
    for got, (_, message) in zip(run_js([c for c, _ in cases]), cases):
        assert got.get("error") == message, (got, message)


def semi_problems() -> dict[str, tuple]:
    """(a, b, C) of semi-relaxed problems: Attention as transport's at its defaults (its 4 queries over 3 keys, and
    with a prior that is 0 on a key) and the transport problems above."""
    inputs = av.Inputs(av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS), None, (av.SEMI,), av.DEFAULT_ALPHA)
    prior = av.Inputs(inputs.scores, torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), (av.SEMI,), av.DEFAULT_ALPHA)
    return {"attention defaults": av.semi_problem(inputs), "attention, prior 0 on a key": av.semi_problem(prior),
            **{name: tuple(torch.as_tensor(x, dtype=torch.float64) for x in p) for name, p in plan_problems().items()}}


def column_condition_error(a, b, C, f, gamma, rho, P) -> float:
    """||P^T 1 - q*||_1 with q* the column sums the column condition gives the rows f (wviz.ot.semirelaxed): the
    plain column update g_j = gamma log b_j - phi gamma LSE_i((f_i - C_ij) / gamma), phi = rho / (rho + gamma)."""
    phi = rho / (rho + gamma)
    L = torch.logsumexp((f[:, None] - C) / gamma, dim=0)
    g = torch.where(b > 0, gamma * torch.where(b > 0, b, 1).log() - phi * gamma * L, -math.inf)
    q = torch.exp((f[:, None] + g[None, :] - C) / gamma).sum(0)
    return float((P.sum(0) - q).abs().sum())


def test_semi_relaxed_sinkhorn_warm_started_meets_its_optimality_conditions():
    """The browser's semi-relaxed Sinkhorn, warm-started as a drag does (from wviz's potentials at 1.21 times gamma
    and rho), from rho = 0 (prior-softmax, closed form) to infinity (balanced), at two gammas: its rows hold a and
    its columns the column condition of its own rows to 1e-6 (both measured here), and its plan equals
    wviz.ot.sinkhorn's with rho to twice that, with exact zeros where a mass is 0."""
    cases, expected = [], []
    for name, (a, b, C) in semi_problems().items():
        unit = float(C.abs().max()) or 1.0
        for gamma_rel in (1e-2, 1.0):
            for rho_rel in (0.0, 1e-3, 1.0, 1e3, math.inf):
                gamma, rho = gamma_rel * unit, rho_rel * unit
                before = ot.sinkhorn(a, b, C, 1.21 * gamma, rho=1.21 * rho)
                cases.append({"fn": "semiSinkhorn", "args": [a, b, C, gamma, rho,
                                                             {"f": before.f, "g": before.g, "tol": tv.TOL}]})
                expected.append((name, gamma, rho, a, b, C, ot.sinkhorn(a, b, C, gamma, rho=rho).plan))
    for (name, gamma, rho, a, b, C, want), got in zip(expected, run_js(cases)):
        case = (name, gamma, rho)
        P = torch.tensor(got["out"]["plan"], dtype=torch.float64)
        f = torch.tensor([-math.inf if x is None else x for x in got["out"]["f"]], dtype=torch.float64)
        assert got["out"]["converged"], (case, got["out"]["error"])
        assert float((P.sum(1) - a).abs().sum()) <= tv.TOL, case
        if 0 < rho < math.inf:
            assert column_condition_error(a, b, C, f, gamma, rho, P) <= tv.TOL, case
        else:   # the ends: the prior-softmax rows, the balanced columns
            assert float((P.sum(0) - b).abs().sum()) <= tv.TOL or rho == 0, case
        torch.testing.assert_close(torch.tensor(got["out"]["columns"], dtype=torch.float64), P.sum(0), rtol=0,
                                   atol=1e-15)
        assert (P - want).abs().max() <= 2 * tv.TOL, (case, float((P - want).abs().max()))
        assert (P[a == 0] == 0).all() and (P[:, b == 0] == 0).all(), case


def test_semi_relaxed_sinkhorn_refuses_what_wviz_ot_refuses_with_its_message():
    a = b = torch.full((2,), 0.5, dtype=torch.float64)
    C = torch.eye(2, dtype=torch.float64)
    good = {"f": [0.0, 0.0], "g": [0.0, 0.0]}
    cases = [
        ({"fn": "semiSinkhorn", "args": [a, b, C, 0.1, -1.0, good]},
         python_message(ot.sinkhorn, a, b, C, 0.1, rho=-1.0)),
        ({"fn": "semiSinkhorn", "args": [a, b, [[0.0, "NaN"], [1.0, 0.0]], 0.1, 1.0, good]},
         python_message(ot.sinkhorn, a, b, torch.tensor([[0.0, math.nan], [1.0, 0.0]], dtype=torch.float64), 0.1,
                        rho=1.0)),
        ({"fn": "semiSinkhorn", "args": [a, b, C, 0.0, 1.0, good]},
         python_message(ot.sinkhorn, a, b, C, 0.0, rho=1.0)),
    ]
    for got, (_, message) in zip(run_js([c for c, _ in cases]), cases):
        assert got.get("error") == message, (got, message)


def test_fenchel_estimates_agree_with_wviz_fenchel():
    """The Fenchel dual page's three estimates at alpha: h (12) at the dual maximiser, (18) at alpha z and (15) at
    the second-order lambda, for each preset's templates and a random preference with a zero (d = 2 and 3), from
    alpha = 1e-2 to 10 (the slider's range) and 100: equal to wviz.fenchel's to 1e-9."""
    from wviz import fenchel
    from wviz.views import fenchel_dual as fv

    g = torch.Generator().manual_seed(0)
    problems = {name: (t.t, t.u, torch.tensor(fv.DEFAULT_Z, dtype=torch.float64))
                for name, t in ((n, fv.templates_from_table(table, True)) for n, table in fv.PRESETS.items())}
    for d in (2, 3):
        u = torch.rand(12, generator=g, dtype=torch.float64)
        u[4] = 0.0
        problems[f"random, d = {d}"] = (torch.randn(12, d, generator=g, dtype=torch.float64), u / u.sum(),
                                        torch.randn(d, generator=g, dtype=torch.float64))
    cases, expected = [], []
    for name, (t, u, z) in problems.items():
        for alpha in (1e-2, 0.316, 1.0, 10.0, 100.0):
            cases.append({"fn": "fenchelEstimates", "args": [t, u, z, alpha]})
            expected.append((name, alpha, [fenchel.h_exact(t, u, z, alpha), fenchel.h_approx(t, u, z, alpha, 1),
                                           fenchel.h_approx(t, u, z, alpha, 2)]))
    for (name, alpha, want), got in zip(expected, run_js(cases)):
        for key, h in zip(("h", "h1", "h2"), want):
            assert (torch.tensor(got["out"][key], dtype=torch.float64) - h).abs().max() <= 1e-9, (name, alpha, key)
    message = python_message(fenchel.h_exact, problems["random, d = 2"][0], problems["random, d = 2"][1],
                             problems["random, d = 2"][2], 0.0)
    assert run_js([{"fn": "fenchelEstimates", "args": [*problems["random, d = 2"], 0.0]}])[0]["error"] == message


def gaussian_tokens() -> dict[str, torch.Tensor]:
    """Token tables [x, y, sigma_x, sigma_y, rho]: the page's, random ones (sigmas from 0.05 to 2, |rho| < 0.95, the
    sliders' ranges) and one where every token has the same covariance."""
    from wviz.views import gaussian_w2 as gv

    g = torch.Generator().manual_seed(0)
    n = 9
    random = torch.cat([torch.randn(n, 2, generator=g, dtype=torch.float64) * 2,
                        0.05 + 1.95 * torch.rand(n, 2, generator=g, dtype=torch.float64),
                        1.9 * torch.rand(n, 1, generator=g, dtype=torch.float64) - 0.95], 1)
    equal = random.clone()
    equal[:, 2:] = random[0, 2:]
    return {"page defaults": torch.tensor(gv.DEFAULT[gv.COLUMNS].to_numpy(), dtype=torch.float64),
            "random": random, "equal covariances": equal}


def test_gaussian_w2_agrees_with_wviz_gaussian():
    """W2^2 of every pair of 2-D Gaussians by the 2 x 2 closed form (no matrix root), full and diagonal, equal to
    wviz.gaussian's (eigenvalues of S_j^{1/2} S_i S_j^{1/2}) to 1e-9; each ellipse equal to wviz.gaussian.ellipse's."""
    from wviz import gaussian
    from wviz.views import gaussian_w2 as gv

    cases, expected = [], []
    for name, params in gaussian_tokens().items():
        for diagonal in (False, True):
            t = gv.tokens([str(i) for i in range(len(params))], params, diagonal)
            cases.append({"fn": "gaussianW2", "args": [params, diagonal]})
            expected.append((name, diagonal, "W2^2", gaussian.pairwise_w2_squared(t.means, t.covs, t.means, t.covs)))
            for n_sigma in (1, 2):
                cases.append({"fn": "gaussianEllipse", "args": [params[1], diagonal, n_sigma, 100]})
                e = gaussian.ellipse(t.means[1], t.covs[1], n_sigma, 100)
                expected.append((name, diagonal, f"ellipse {n_sigma}", {"x": e[:, 0], "y": e[:, 1]}))
    for (name, diagonal, what, want), got in zip(expected, run_js(cases)):
        if isinstance(want, dict):
            for k in "xy":
                assert (torch.tensor(got["out"][k], dtype=torch.float64) - want[k]).abs().max() <= 1e-9, (name, what)
        else:
            assert (torch.tensor(got["out"], dtype=torch.float64) - want).abs().max() <= 1e-9, (name, diagonal, what)


def test_gaussian_w2_of_degenerate_gaussians_by_their_closed_forms():
    """Where the covariances are singular (|rho| = 1 or a zero sigma: the sliders' ends), against W2^2 by another
    route: with S = F F^T (F the Cholesky-like factor below, defined at |rho| = 1 and sigma = 0 too),
    tr (S_j^{1/2} S_i S_j^{1/2})^{1/2} is the nuclear norm of F_i^T F_j, whose singular values come to rounding of
    |F|^2. wviz.gaussian takes eigenvalues of S_j^{1/2} S_i S_j^{1/2} there, whose rounding (about eps |M|) grows to
    about sqrt(eps) under the root: this is the sharper reference at the singular ends."""
    tokens = torch.tensor([[0.0, 0.0, 1.2, 0.7, 1.0], [1.0, -0.5, 0.3, 1.9, -1.0], [0.4, 0.2, 0.0, 0.0, 0.3],
                           [-1.0, 2.0, 2.0, 0.0, 0.5], [0.5, 0.5, 0.8, 1.1, 0.2]], dtype=torch.float64)

    def factor(row):   # S = F F^T with F = [[sx, 0], [rho sy, sy sqrt(1 - rho^2)]]
        sx, sy, rho = row[2:].tolist()
        return torch.tensor([[sx, 0.0], [rho * sy, sy * math.sqrt(1 - rho * rho)]], dtype=torch.float64)

    got = torch.tensor(run_js([{"fn": "gaussianW2", "args": [tokens, False]}])[0]["out"], dtype=torch.float64)
    for i in range(5):
        for j in range(5):
            Fi, Fj = factor(tokens[i]), factor(tokens[j])
            # tr (S_j^{1/2} S_i S_j^{1/2})^{1/2} is the nuclear norm of F_i^T F_j (singular values of a 2 x 2)
            nuclear = float(torch.linalg.svdvals(Fi.T @ Fj).sum())
            want = float(((tokens[i, :2] - tokens[j, :2]) ** 2).sum() + (Fi ** 2).sum() + (Fj ** 2).sum()
                         - 2 * nuclear)
            assert abs(float(got[i, j]) - max(want, 0.0)) <= 1e-12, (i, j)


def test_particle_flow_agrees_with_wviz_measure():
    """The Particles page's flow (003, Sec. 3.1) at tau from 0.01 to 100: the default preset with both potentials,
    random weights shared and one triple per layer (value scale 0.6), residual connections with normalisation:
    every layer's points equal wviz.measure.self_attention_flow's to 1e-9; its refusals carry Python's message."""
    from wviz import measure
    from wviz.views import particles as pv

    x = pv.particles(pv.PRESETS[0], 40, 0)
    settings = {"identity": dict(potential="gaussian", projections=None),
                "dot": dict(potential="dot", projections=None),
                "shared": dict(potential="gaussian", projections=pv.layer_projections(2, 6, False, True, 3, 0.6)),
                "per layer": dict(potential="dot", projections=pv.layer_projections(2, 6, False, False, 3, 0.6)),
                "residual, norm": dict(potential="gaussian", projections=None, residual=True, norm=True)}
    cases, expected = [], []
    for name, kw in settings.items():
        p = kw["projections"]
        per_layer = [p] * 6 if isinstance(p, tuple) else p
        for tau in (0.01, 0.3, 10.0, 100.0):
            cases.append({"fn": "particleFlow", "args": [x, 6, kw["potential"], tau, per_layer,
                                                         kw.get("residual", False), kw.get("norm", False)]})
            expected.append((name, tau, measure.self_attention_flow(x, 6, tau=tau, shared=not isinstance(p, list),
                                                                    **kw)))
    for (name, tau, want), got in zip(expected, run_js(cases)):
        assert (torch.tensor(got["out"], dtype=torch.float64) - want).abs().max() <= 1e-9, (name, tau)

    far = torch.full((3, 2), 1e300, dtype=torch.float64)
    far[1] *= 0.5
    eye = torch.eye(2, dtype=torch.float64)
    refused = {   # x + the softmax mean of x doubles every layer; a lone particle plus its value -x is at the origin
        "overflow": (far, dict(potential="dot", projections=None, residual=True)),
        "origin": (torch.tensor([[1.0, 0.5]], dtype=torch.float64),
                   dict(potential="dot", projections=(eye, eye, -eye), residual=True, norm=True)),
    }
    for name, (points, kw) in refused.items():
        message = python_message(measure.self_attention_flow, points, 3, tau=1.0, **kw)
        p = kw["projections"]
        got = run_js([{"fn": "particleFlow", "args": [points, 3, kw["potential"], 1.0, p and [p] * 3,
                                                      kw.get("residual", False), kw.get("norm", False)]}])
        assert got[0].get("error") == message, (name, got, message)


def test_landscape_objective_and_numerical_argmin_agree_with_wviz():
    """The landscape view of three keys for each mechanism (entmax at alpha 1.3 and 1, prior-softmax with a zero
    prior weight), tau from 1e-3 to 100: every cell of the objective equal to wviz.views.attention_transport's to
    1e-9 (the same cells blank), the interior-point argmin equal to wviz.attention.solve_simplex's to 1e-9 and the
    closed form's to 1e-6 (solve_simplex's own accuracy at a key on the support's edge is about sqrt(tol))."""
    s = av.scores_from_points(av.DEFAULT_QUERY, av.DEFAULT_KEYS)
    prior = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    cases, expected = [], []
    for mechanism, alpha, pr in (("softmax", 1.5, None), ("sparsemax", 1.5, None), ("entmax", 1.3, None),
                                 ("entmax", 1.0, None), ("prior-softmax", 1.5, prior)):
        live = av.landscape_live_inputs(mechanism, s, pr)
        for tau in (1e-3, 0.1, 1.0, 100.0):
            land = av.landscape(mechanism, s, tau, alpha, pr)
            cases += [{"fn": "landscapeValues", "args": [live["omega"], s, tau, alpha, pr, live["width"]]},
                      {"fn": "solveSimplex", "args": [s, live["omega"], tau, alpha, pr]}]
            expected.append((mechanism, alpha, tau, land))
    got = run_js(cases)
    for k, (mechanism, alpha, tau, land) in enumerate(expected):
        values = torch.tensor([[math.nan if v is None else v for v in row] for row in got[2 * k]["out"]],
                              dtype=torch.float64)
        want = torch.where(torch.isfinite(land.values), land.values, math.nan)
        assert torch.equal(values.isnan(), want.isnan()), (mechanism, tau)
        assert (values - want).nan_to_num().abs().max() <= 1e-9, (mechanism, alpha, tau)
        numerical = torch.tensor(got[2 * k + 1]["out"], dtype=torch.float64)
        assert (numerical - land.numerical).abs().max() <= 1e-9, (mechanism, alpha, tau)
        assert (numerical - land.closed_form).abs().max() <= 1e-6, (mechanism, alpha, tau)
