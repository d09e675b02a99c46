"""The "Particles and contraction" page's computations against independent references: the flow layer by layer
with numpy's softmax, W1 by POT's exact solver (ot.emd2) on the l1 (or l2) cost, the Jacobian by finite
differences, the bounds of Thm. 23 / Cor. 30 and the envelope of Prop. 26 by their formulas."""
import itertools
import math

import numpy as np
import ot
import pytest
import torch

from wviz import measure, sample_data
from wviz.figures import particles as figures
from wviz.views import particles as pv

torch.set_num_threads(1)


def np_attention(x, projections, potential, tau):
    """x_i -> sum_j softmax_j(a(x_i W_Q, x_j W_K)) x_j W_V with numpy (Prop. 9)."""
    W_Q, W_K, W_V = (np.eye(x.shape[1]),) * 3 if projections is None else (np.asarray(W) for W in projections)
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    a = q @ k.T / tau if potential == "dot" else -((q[:, None] - k[None]) ** 2).sum(-1) / tau
    e = np.exp(a - a.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)) @ v


def pot_w1(x, y, ground="l1"):
    """W1 between the uniform measures on the rows of x and y, by POT's network simplex."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    C = ot.dist(x, y, metric="cityblock" if ground == "l1" else "euclidean")
    return ot.emd2(np.full(len(x), 1 / len(x)), np.full(len(y), 1 / len(y)), C)


def make(potential="gaussian", identity=True, shared=True, value_scale=1.0, residual=False, norm=False,
         ground="l1", n=12, layers=4, seed=0, source="clusters", upload=None):
    return pv.inputs(source, n, upload, seed, layers, potential, identity, shared, value_scale, residual, norm, ground)


# ---- inputs ----------------------------------------------------------------------------------------------------

def test_presets_are_the_sample_clouds_in_the_plane():
    x = pv.particles("clusters", 9, 3)
    a, b = sample_data.point_clouds("gaussians", 4, 5, 3)
    np.testing.assert_array_equal(x.numpy(), np.concatenate([a.numpy(), b.numpy()]))
    ring = pv.particles("ring", 200, 1).numpy()
    assert abs(np.linalg.norm(ring, axis=1).mean() - 1) < 0.05            # a noisy circle of radius 1
    square = pv.particles("random", 300, 2).numpy()
    assert square.shape == (300, 2) and square.min() >= -1 and square.max() <= 1 and square.min() < -0.95
    with pytest.raises(ValueError, match="unknown preset"):
        pv.particles("spiral", 10)
    with pytest.raises(ValueError, match="at least two"):
        pv.particles("ring", 1)


def test_an_upload_gives_x_and_y_as_uniform_measures():
    src, tgt = [[0.0, 0.0], [1.0, 0.2], [0.3, 1.1]], [[0.1, -0.2], [1.2, 0.4]]
    csv = "cloud,x,y\n" + "".join(f"source,{a},{b}\n" for a, b in src) + "".join(f"target,{a},{b}\n" for a, b in tgt)
    i = make(source=pv.UPLOAD, n=None, upload=csv.encode())
    np.testing.assert_array_equal(i.x.numpy(), src)
    np.testing.assert_array_equal(i.y.numpy(), tgt)
    assert i.n == 3
    constant = csv.replace("cloud,x,y", "cloud,x,y,mass").replace("\n", ",2\n").replace("mass,2", "mass")
    np.testing.assert_array_equal(pv.uploaded_particles(constant.encode())[0].numpy(), src)
    uneven = "cloud,x,y,mass\nsource,0,0,1\nsource,1,0,3\ntarget,0,1,1\n"
    with pytest.raises(ValueError, match="source masses differ: particles are the uniform measure"):
        pv.uploaded_particles(uneven.encode())
    with pytest.raises(ValueError, match="upload a CSV"):
        make(source=pv.UPLOAD, n=None, upload=None)


def test_layer_projections_shared_per_layer_and_scaled():
    assert pv.layer_projections(2, 5, True, True, 7) is None
    eye = np.eye(2)
    W = pv.layer_projections(2, 5, True, False, 7, 0.5)            # identities: one triple even when not shared
    assert isinstance(W, tuple)
    np.testing.assert_array_equal(np.stack([w.numpy() for w in W]), [eye, eye, 0.5 * eye])
    W = pv.layer_projections(2, 3, False, True, 7, 0.5)
    ref = sample_data.projections(2, 7)
    for w, r, s in zip(W, ref, (1, 1, 0.5)):
        np.testing.assert_array_equal(w.numpy(), s * r.numpy())
    per = pv.layer_projections(2, 3, False, False, 7)
    assert len(per) == 3 and pv.first_layer(per) is per[0]
    for h, triple in enumerate(per):
        for w, r in zip(triple, sample_data.projections(2, 7 + h)):
            np.testing.assert_array_equal(w.numpy(), r.numpy())


# ---- the flow --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("potential,identity,shared,residual,norm,ground", [
    ("gaussian", True, True, False, False, "l1"),
    ("dot", False, True, False, False, "l1"),
    ("gaussian", False, False, True, True, "l2"),
    ("dot", True, True, True, False, "l2"),
])
def test_flow_is_softmax_attention_layer_by_layer_with_w1_steps(potential, identity, shared, residual, norm, ground):
    i = make(potential, identity, shared, 0.8, residual, norm, ground, layers=3)
    f = pv.flow(i, 0.7)
    x = i.x.numpy()
    per = i.projections if isinstance(i.projections, list) else [i.projections] * 3
    assert f.trajectory.shape == (4, 12, 2) and f.steps.shape == (3,)
    for h in range(3):
        y = np_attention(x, per[h], potential, 0.7)
        y = x + y if residual else y
        y = y / np.linalg.norm(y, axis=1, keepdims=True) if norm else y
        np.testing.assert_allclose(f.trajectory[h + 1].numpy(), y, atol=1e-10)
        assert f.steps[h].item() == pytest.approx(pot_w1(x, y, ground), abs=1e-10)
        x = y


# ---- contraction -----------------------------------------------------------------------------------------------

def test_dropped_token_pairs_and_the_uploaded_pair_are_pot_w1():
    x = pv.particles("clusters", 10, 1)
    y = x[:7] + 0.05
    i = pv.Inputs(x, y, 2, "gaussian", None, False, False, "l1", 3)
    f = pv.flow(i, 0.5)
    con = pv.contraction(f, "drop", 6, 0.1)
    X, out = x.numpy(), np_attention(x.numpy(), None, "gaussian", 0.5)
    # each sampled pair is m(X) against m(X without token t) for some t
    candidates = []
    for t in range(10):
        Xt = np.delete(X, t, axis=0)
        candidates.append((pot_w1(X, Xt), pot_w1(out, np_attention(Xt, None, "gaussian", 0.5))))
    for w_in, w_out in zip(con.sampled.w1_in.tolist(), con.sampled.w1_out.tolist()):
        assert min(abs(w_in - a) + abs(w_out - b) for a, b in candidates) < 1e-10
    assert con.largest_ratio == pytest.approx(max(b / a for a, b in zip(con.sampled.w1_in.tolist(),
                                                                        con.sampled.w1_out.tolist())))
    Y = y.numpy()
    assert con.pair[0] == pytest.approx(pot_w1(X, Y), abs=1e-12)
    assert con.pair[1] == pytest.approx(pot_w1(out, np_attention(Y, None, "gaussian", 0.5)), abs=1e-12)
    # Cor. 30, N = min(N - 1, 7), d = 2, K_l = 1: 2 d [sqrt(d) sqrt(ln N + 1/(2e)) sqrt(2/e) + 1 + sqrt(d) + 2]
    d, N = 2, 7
    cor30 = 2 * d * (math.sqrt(d) * math.sqrt(math.log(N) + 1 / (2 * math.e)) * math.sqrt(2 / math.e) + 1
                     + math.sqrt(d) + 2)
    assert con.cor30 == pytest.approx(cor30, rel=1e-12) and con.slopes["Cor. 30"] == con.cor30


def test_bounds_are_thm23_cor30_and_the_worst_move_is_the_jacobian_norm():
    i = make("gaussian", n=8)
    f = pv.flow(i, 0.6)
    con = pv.contraction(f, "noise", 8, 0.1)
    t = con.thm23
    assert con.slopes["Thm. 23 (corrected)"] == t.bound
    assert t.bound == pytest.approx(2 * (2 * (t.lip_first + t.lip_second) * t.diam + t.sup) / t.eps * t.k_l)
    assert t.printed == pytest.approx(2 * 2 * (t.lip_first + t.lip_second) * t.diam / t.eps * t.k_l)
    lo, hi = con.sampled.lo.numpy(), con.sampled.hi.numpy()
    assert t.diam == pytest.approx((hi - lo).sum()) and (lo <= i.x.numpy().min(0)).all()
    # the worst infinitesimal move: the largest column l1 norm of the Jacobian, by central differences
    x, n = i.x.numpy().ravel(), 16
    J = np.zeros((n, n))
    for c in range(n):
        e = np.zeros(n)
        e[c] = 1e-6
        J[:, c] = (np_attention((x + e).reshape(8, 2), None, "gaussian", 0.6)
                   - np_attention((x - e).reshape(8, 2), None, "gaussian", 0.6)).ravel() / 2e-6
    assert con.local == pytest.approx(np.abs(J).sum(0).max(), abs=1e-6)
    ratios = con.sampled.ratio.numpy()
    assert (ratios <= t.bound).all() and (ratios <= con.cor30).all()
    assert {k for k, v in con.slopes.items() if v is not None} == {
        "y = x", "worst infinitesimal move ||J||", "Thm. 23 (corrected)", "Thm. 23 as printed", "Cor. 30"}


def test_no_bounds_for_l2_and_no_cor30_for_dot_or_random_projections():
    con = pv.contraction(pv.flow(make(ground="l2"), 0.5), "noise", 4, 0.1)
    assert (con.local, con.thm23, con.cor30) == (None, None, None)
    assert {k for k, v in con.slopes.items() if v is not None} == {"y = x"}
    assert pv.contraction(pv.flow(make("dot"), 0.5), "noise", 4, 0.1).cor30 is None
    assert pv.contraction(pv.flow(make(identity=False), 0.5), "noise", 4, 0.1).cor30 is None
    # W_Q = W_K = I with a scaled W_V: Cor. 30 applies with K_l = ||s I||_1 = s
    scaled = pv.contraction(pv.flow(make(value_scale=0.5), 0.5), "noise", 4, 0.1)
    assert scaled.cor30 == pytest.approx(0.5 * measure.cor30_bound(12, 2))


# ---- infinite depth --------------------------------------------------------------------------------------------

def test_fixed_point_envelope_is_prop26():
    """Small values (s = 0.1) at a large temperature: Thm. 23 proves kappa(T) < 1 on E = [-r, r]^2 and the
    distance to the last iterate stays under kappa^l / (1 - kappa) W1(mu^1, mu^0)."""
    i = make("gaussian", value_scale=0.1, n=10)
    fix = pv.fixed_point(pv.flow(i, 100.0))
    c, fp = fix.banach, fix.result
    assert c is not None and c.bound < 1 and fp.converged
    r = np.abs(i.x.numpy()).max()
    assert c.diam == pytest.approx(4 * r)
    step0 = pot_w1(i.x.numpy(), np_attention(i.x.numpy(), i.projections, "gaussian", 100.0))
    assert fp.steps[0].item() == pytest.approx(step0, abs=1e-12)
    levels = np.arange(fp.n_iter + 1)
    np.testing.assert_allclose(fix.envelope.numpy(), c.bound ** levels / (1 - c.bound) * step0, rtol=1e-12)
    assert (fp.to_last.numpy() <= fix.envelope.numpy() + 1e-12).all()
    assert not fix.lone_points_fixed


def test_fixed_point_without_banach():
    plain = pv.fixed_point(pv.flow(make("gaussian", n=8), 0.3), max_iter=5)
    assert plain.banach is not None and plain.banach.bound >= 1 and plain.envelope is None
    assert plain.lone_points_fixed                                    # Gaussian potential, identity projections
    for setting in (dict(residual=True), dict(norm=True), dict(ground="l2"), dict(value_scale=1.5)):
        fix = pv.fixed_point(pv.flow(make("gaussian", n=8, **setting), 0.3), max_iter=3)
        assert fix.banach is None and fix.envelope is None, setting


# ---- maximum entropy and Cor. 30 -------------------------------------------------------------------------------

@pytest.mark.parametrize("potential", pv.POTENTIALS)
def test_max_entropy_star_is_the_softmax_row_of_the_query(potential):
    i = make(potential, identity=False, n=9)
    chk = pv.max_entropy(pv.flow(i, 0.8), 5)                            # the 5th token, counted from 1
    x = i.x.numpy()
    W_Q, W_K, _ = (w.numpy() for w in i.projections)
    q, k = x[4] @ W_Q, x @ W_K
    a = q @ k.T / 0.8 if potential == "dot" else -((q - k) ** 2).sum(-1) / 0.8
    p = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
    np.testing.assert_allclose(chk.gibbs.numpy(), p, atol=1e-13)
    assert chk.entropy.item() == pytest.approx(-(p * np.log(p * 9)).sum(), abs=1e-12)   # -KL(p || uniform)
    assert (chk.entropies <= chk.entropy + 1e-12).all()
    last = pv.max_entropy(pv.flow(i, 0.8), 99)                          # past the end: the last token
    q = x[-1] @ W_Q
    a = q @ k.T / 0.8 if potential == "dot" else -((q - k) ** 2).sum(-1) / 0.8
    np.testing.assert_allclose(last.gibbs.numpy(), np.exp(a - a.max()) / np.exp(a - a.max()).sum(), atol=1e-13)


def test_max_entropy_at_the_defaults_shows_a_visible_peak():
    """At the page's defaults (tau = 0.3) the far cluster's tokens have Gibbs weights near 1e-18, and directions
    through them allowed steps of femto size only ('5f' on the t axis): the directions move mass between the
    tokens that carry weight, so the steps span more than 1e-6 and the curves fall visibly, and each is still a
    measure that keeps the mass and the moment, whose entropy is at most the Gibbs measure's (Thm. 14), below it
    by exactly KL(mu || Gibbs) (the theorem's proof)."""
    chk = pv.max_entropy(pv.at_defaults()(0.3), 1)
    g, v = chk.gibbs, chk.directions
    carry = g >= pv.CARRIES * g.max()
    assert 0 < int(carry.sum()) < len(g) and pv.carriers(chk) == int(carry.sum())   # the far cluster left out
    assert float(v[:, ~carry].abs().max()) == 0
    np.testing.assert_allclose(v.sum(-1).numpy(), 0, atol=1e-12)                 # the total mass kept
    np.testing.assert_allclose((v @ chk.features).numpy(), 0, atol=1e-12)        # and the moment
    t = chk.t.numpy()
    assert (t.max(1) - t.min(1)).min() > 1e-3 and (t.min(1) <= 0).all() and (t.max(1) >= 0).all()
    mu = (g[None, None] + chk.t[..., None] * v[:, None]).clamp_min(0)
    assert float(mu.min()) >= 0
    kl = (mu * torch.where(mu > 0, mu / g, torch.ones_like(mu)).log()).sum(-1)
    np.testing.assert_allclose(chk.entropies.numpy(), (chk.entropy - kl).numpy(), atol=1e-12)
    assert float(chk.entropy - chk.entropies.min()) > 1e-3                       # a peak the eye sees
    fig = figures.max_entropy(chk.t, chk.entropies, chk.entropy)
    # one legend entry for the eight directions, at the figure's bottom: eight took four rows, into the x title
    assert [t.name for t in fig.data if t.showlegend is not False] == ["8 random directions",
                                                                       "Boltzmann-Gibbs Psi_G(nu) (t = 0)"]
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0


def test_max_entropy_keeps_a_direction_when_few_tokens_carry_weight():
    """At tau = 0.01 one token carries nearly all the weight: the directions use the fewest heaviest tokens that
    leave one (the moment's coordinates plus 2), and the curves still peak at the star."""
    chk = pv.max_entropy(pv.flow(make("gaussian", n=12), 0.01), 1)
    assert pv.carriers(chk) == chk.features.shape[1] + 2
    assert (chk.entropies <= chk.entropy + 1e-12).all()


def test_cor30_failure_for_n_up_to_10_to_the_12():
    res = pv.cor30_failure()
    n = res.n.numpy()
    np.testing.assert_array_equal(n, 10.0 ** np.arange(1, 13))
    bound = 2 * (np.sqrt(np.log(n) + 1 / (2 * np.e)) * np.sqrt(2 / np.e) + 1 + 1 + 2)
    np.testing.assert_allclose(res.bound.numpy(), bound, rtol=1e-12)
    q, big = 0.85, n >= 1e5
    R2 = np.log(n - 1) - np.log(q / (1 - q))
    np.testing.assert_allclose(res.ratio.numpy()[big], ((1 - q) + 2 * q * R2)[big], rtol=1e-3)
    assert res.ratio[0] < res.bound[0] and res.ratio[-1] > res.bound[-1]


# ---- the example upload, the animation, the readable axes and the guided experiments ----------------------------

def test_example_file_goes_through_the_pages_parser():
    i = make(source=pv.UPLOAD, n=None, upload=pv.example_particles_csv())
    x, y = i.x.numpy(), i.y.numpy()
    assert x.shape == y.shape == (6, 2) and i.n == 6
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 0.8, atol=1e-4)
    turn = np.angle((y[:, 0] + 1j * y[:, 1]) / (x[:, 0] + 1j * x[:, 1]))
    np.testing.assert_allclose(turn, np.pi / 6, atol=1e-4)             # Y is X turned by 30 degrees
    assert "-0.0000" not in pv.example_particles_csv().decode()


def test_flow_frames_are_the_particles_layer_by_layer_on_fixed_axes():
    f = pv.flow(make(layers=5), 0.5)
    frames = figures.flow_frames(f.trajectory, "gaussian")
    assert len(frames) == 6
    ranges = {(tuple(fr.layout.xaxis.range), tuple(fr.layout.yaxis.range)) for fr in frames}
    assert len(ranges) == 1                                           # the axes do not jump between frames
    for h, fr in enumerate(frames):
        assert fr.layout.title.text == f"gaussian: layer {h} of 5"
        np.testing.assert_array_equal(np.stack([fr.data[1].x, fr.data[1].y], 1), f.trajectory[h].numpy())
    for before, after in itertools.pairwise(frames):                      # every frame differs from the last
        assert np.abs(np.asarray(after.data[1].x) - np.asarray(before.data[1].x)).max() > 0
    main = figures.particles_animation(f.trajectory)
    np.testing.assert_array_equal(main.data[1].x, frames[-1].data[1].x)   # the still of the last layer


def decades(axis):
    """A log axis labelled in full at 1, 2 or 5 times powers of ten: each label is its tick's whole value."""
    vals = np.asarray(axis.tickvals, float)
    leading = vals / 10.0 ** np.floor(np.log10(vals) + 1e-9)
    full = all("<sup>" in t or float(t) == pytest.approx(v) for v, t in zip(vals, axis.ticktext))
    return axis.tickmode == "array" and set(np.round(leading, 9)) <= {1.0, 2.0, 5.0} and full


def test_log_axes_are_labelled_in_full():
    con = pv.contraction(pv.flow(make(n=8), 0.6), "noise", 8, 0.1)
    fig = figures.contraction_scatter(con.sampled.w1_in, con.sampled.w1_out, con.slopes, None, "noise")
    assert decades(fig.layout.xaxis) and decades(fig.layout.yaxis)
    lo, hi = fig.layout.yaxis.range
    inside = [t for v, t in zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext) if lo <= np.log10(v) <= hi]
    assert len(inside) >= 2 and len(set(inside)) == len(inside)       # no "5, 2, 1, 5, 2": each label once
    fix = pv.fixed_point(pv.flow(make("gaussian", value_scale=0.1, n=10), 100.0))
    assert decades(figures.fixed_point_history(fix.result.steps, fix.result.to_last, fix.envelope).layout.yaxis)
    res = pv.cor30_failure()
    cor = figures.cor30_failure(res.n, res.ratio, res.bound)
    assert decades(cor.layout.xaxis) and list(cor.layout.xaxis.ticktext) == [
        "10", "100", "1000", "10<sup>4</sup>", "10<sup>5</sup>", "10<sup>6</sup>", "10<sup>7</sup>",
        "10<sup>8</sup>", "10<sup>9</sup>", "10<sup>10</sup>", "10<sup>11</sup>", "10<sup>12</sup>"]


def test_the_side_by_side_view_opens_on_grid_temperatures():
    assert pv.SIDE_TAUS == (0.1, 1.0)


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_flow(params: dict, tau: float | None = None) -> pv.Flow:
    """The flow the page computes when a link sets ``params`` (every other widget at its default: 40 clustered
    particles, seed 0, 10 layers, the Gaussian potential, identity projections, value scale 1, tau = 0.316)."""
    settings = dict(source=params.get(pv.Keys.PRESET, "clusters"), n=40, layers=10,
                    value_scale=params.get(pv.Keys.VALUE_SCALE, 1.0))
    return pv.flow(make(**settings), tau if tau is not None else params.get(pv.Keys.TAU, 0.316))


def clusters(points: np.ndarray, within: float = 1e-3) -> list[np.ndarray]:
    """The particles grouped with every particle within ``within`` (l-infinity) of its group's first one."""
    groups = []
    for x in points:
        for g in groups:
            if np.abs(g[0] - x).max() < within:
                g.append(x)
                break
        else:
            groups.append([x])
    return [np.array(g) for g in groups]


def watch_large_tau(params):
    f = link_flow(params)
    assert np.ptp(f.trajectory[5].numpy(), axis=0).max() < 1e-12            # one point after five layers
    assert (f.steps[4:] < 1e-8).all() and f.steps[0] > 0.1                   # the steps from layer 5 on


def watch_small_tau(params):
    groups = clusters(link_flow(params).trajectory[-1].numpy())
    assert 9 <= len(groups) <= 15                                            # about a dozen
    centres = np.array([g.mean(0) for g in groups])
    gaps = np.abs(centres[:, None] - centres[None]).max(-1) + np.diag(np.full(len(groups), np.inf))
    assert gaps.min() > 10 * 1e-3                                            # and apart


def watch_two_temperatures(params):
    small = clusters(link_flow(params, params[pv.Keys.SIDE_TAU + "_left"]).trajectory[-1].numpy())
    large = clusters(link_flow(params, params[pv.Keys.SIDE_TAU + "_right"]).trajectory[-1].numpy())
    assert len(small) >= 9 and len(large) == 1


def watch_contraction(params):
    con = pv.contraction(link_flow(params), "noise", params[pv.Keys.SAMPLES], 0.1)   # the default perturbation
    assert con.largest_ratio < 1 and 1e41 < con.thm23.bound < 1e43 and 20 < con.cor30 < 35


def watch_fixed_point(params):
    fix = pv.fixed_point(link_flow(params))
    assert fix.banach.bound < 1 and fix.envelope is not None
    assert (fix.result.to_last.numpy() <= fix.envelope.numpy() + 1e-12).all()


WATCH = {"Raise tau to 3.16": watch_large_tau, "Lower tau to 0.0316": watch_small_tau,
         "Compare two temperatures": watch_two_temperatures,
         "Measure the contraction on 32 sampled pairs": watch_contraction,
         "Make the fixed point provable": watch_fixed_point}


@pytest.mark.parametrize("item", pv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)
