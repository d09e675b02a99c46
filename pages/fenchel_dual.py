"""Page "Attention solves a dual problem": attention as the Fenchel-dual solution of problem (4) (source: 002)."""
import functools

import numpy as np
import pandas as pd
import streamlit as st
import torch

from wviz import fenchel, ui
from wviz.views import fenchel_dual as fv
from wviz.figures import fenchel_dual as figs
from wviz.ot import cost_matrix

ui.page_setup(
    "Attention solves a dual problem",
    "The 002 paper (*Deciphering Attention Mechanisms: Optimization and Fenchel Dual Solutions*) reads attention as "
    "an estimate: a preference $u$ over templates $t_i$ says which mixture $p$ of templates is plausible, an "
    "evidence $z$ says how the mean should move from $\\mu = \\sum_i u_i t_i$, and $\\alpha$ says how much to trust "
    "$z$. The best $p$ solves problem (4); its Fenchel dual (9) has a maximiser $\\lambda^*$, and replacing "
    "$\\lambda^*$ by $\\alpha z$ gives exactly attention (18). Move $\\alpha$ and $z$ and watch the exact answer and "
    "attention part ways as $\\alpha$ grows.",
)
ui.equation(r"\min_p \frac{\alpha}{2}\Big\lVert (\mu + z) - \sum_i p_i t_i \Big\rVert^2 + \mathrm{KL}(p \,\|\, u)"
            r"\;\;(4)\qquad \max_\lambda \langle \lambda, \mu + z\rangle - \frac{\lVert\lambda\rVert^2}{2\alpha}"
            r" - \log \sum_i u_i e^{\langle t_i, \lambda\rangle}\;\;(9)")

PRESETS = {
    "Figure 3 (four templates)": pd.DataFrame({
        "template": ["t1", "t2", "t3", "t4"], "x": [0.0, 2.0, 1.0, -1.0], "y": [0.0, 0.0, 1.5, 1.0],
        "u": [0.1, 0.4, 0.3, 0.2]}),
    "Uniform u (dot-product attention)": pd.DataFrame({
        "template": ["t1", "t2", "t3", "t4"], "x": [0.0, 2.0, 1.0, -1.0], "y": [0.0, 0.0, 1.5, 1.0],
        "u": [0.25, 0.25, 0.25, 0.25]}),
    "Two clusters": pd.DataFrame({
        "template": ["a1", "a2", "a3", "b1", "b2"], "x": [-2.0, -1.6, -2.2, 2.0, 2.4], "y": [0.0, 0.5, 0.6, 0.2, -0.3],
        "u": [0.3, 0.2, 0.2, 0.2, 0.1]}),
}

sb = st.sidebar
preset = sb.selectbox("Templates preset", list(PRESETS), key="preset", bind="query-params",
                      help="A starting set of 2-D templates t_i and preference weights u_i; edit them in the table.")
normalise = sb.toggle("Normalise u to sum to 1", value=True, key="normalise", bind="query-params",
                      help="Off: weights that do not sum to 1 are refused, as the library does (u must be a "
                           "distribution).")
alpha_slot = sb.container()  # alpha is drawn here by the fragment below, which an alpha move reruns alone
z = torch.tensor([sb.slider("z_1", -4.0, 4.0, 1.5, 0.05, key="z1", bind="query-params",
                            help="First coordinate of the evidence z (the estimated shift of the mean, eq. (3))."),
                  sb.slider("z_2", -4.0, 4.0, -1.0, 0.05, key="z2", bind="query-params",
                            help="Second coordinate of the evidence z.")], dtype=torch.float64)

st.subheader("Templates and preference")
st.caption("One template per row: its position t_i = (x, y) and its preference weight u_i (>= 0). The size of each "
           "dot below is its weight.")
table = ui.table_editor(PRESETS[preset], f"templates_{preset.split()[0].lower()}", num_rows="dynamic",
                        hide_index=True)


def read_templates():
    if len(table) < 1:
        raise ValueError("add at least one template to the table")
    values = table[["x", "y", "u"]].to_numpy(dtype=float, na_value=np.nan)
    if np.isnan(values).any():
        raise ValueError(f"template {int(np.isnan(values).any(axis=1).argmax()) + 1} has an empty entry")
    t, u = torch.tensor(values[:, :2]), torch.tensor(values[:, 2])
    if normalise and bool((u >= 0).all()) and float(u.sum()) > 0:
        u = u / u.sum()
    names = [str(n) for n in table["template"]]
    return names, t, u


templates = ui.guarded("fenchel/templates", read_templates)
T5_BIAS = pd.DataFrame({"offset j - i": list(range(-3, 4)), "b": [-1.2, -0.6, 0.3, 0.0, 0.8, 0.1, -0.9]})
EXTRAS = pd.DataFrame({"template": ["t2'", "t3'", "far"], "x": [2.25, 0.8, 3.0], "y": [0.3, 1.75, 3.0]})
VIEWS = ["Attention weights", "The dual problem (9)", "Figure 3 grid", "T5 (19)-(20)", "OT-based attention"]


def weights_figure(t, u, names, lam):
    return figs.weight_bars({"p~ of (11) at lambda* (exact)": fenchel.tilted_weights(t, u, lam["exact"]),
                             "attention (18), lambda = alpha z": fenchel.attention_weights(t, u, z, lam["alpha"]),
                             "p~ at lambda of (15)": fenchel.tilted_weights(t, u, lam["second"]), "preference u": u},
                            names, "Attention weights: exact (11) vs attention (18)")


def dual_figures(t, u, est, alpha):
    lam = est["lam"][0]
    span = max(float(lam.abs().max()), float((alpha * z).abs().max()), 0.5)
    xs, ys, dual = fv.dual_surface(t, u, z, alpha, (lam + alpha * z) / 2, 1.3 * span)
    sweep = fv.alpha_sweep(t, u, z, torch.logspace(-2, 1, 61, dtype=torch.float64))
    return (figs.dual_contour(xs, ys, dual, lam, est["lam1"][0], est["lam2"][0], alpha),
            figs.alpha_sweep(sweep, alpha))


def grid_figure(t, u, names, est):
    return figs.estimates_grid(t, u, names, est["mu"], z, fv.estimates(t, u, z, fv.FIGURE3_ALPHAS))


def t5_figure(t, names, j, masked, bias):
    t5 = compute_t5(t, names, j, masked, bias)
    return figs.weight_bars({"u of (19)": t5["u"], "weights of (20), T5's masked biased softmax": t5["w20"],
                             "(18) with alpha = 1 and u of (19)": t5["w18"], "plain softmax <t_i, z>": t5["dot"]},
                            names, f"T5 preference and attention for target {names[j]}")


def ot_figures(t, u, names, alpha, extras, gamma, M):
    A, all_names, uA = universe(t, u, names, extras)
    M = M if M is not None else cost_matrix(A, A, "sqeuclidean")
    panel = fv.ot_panel(A, uA, z, alpha, gamma, M)
    sweep = fv.ot_gamma_sweep(A, uA, z, alpha, torch.logspace(-2, 1, 31, dtype=torch.float64), M)
    return (figs.universe(A, all_names, (uA > 0).numpy(), panel["approx"], z,
                          f"OT attention (25) over A at alpha = {alpha:.3g}, gamma = {gamma:.3g}"),
            figs.weight_bars({"preference u": panel["u"], "true preference u~ (40)": panel["true"],
                              "OT attention p* (25), lambda = alpha z": panel["approx"],
                              "exact p* (38), lambda* of (39)": panel["exact"]}, all_names,
                             "OT attention weights over the universe A"),
            figs.gamma_sweep(sweep, gamma))


def compute_t5(t, names, j, masked, bias_table):
    b = bias_table["b"].to_numpy(dtype=float, na_value=np.nan)
    if np.isnan(b).any():
        raise ValueError("the relative-position bias table has an empty entry")
    mask = torch.tensor([n in masked for n in names])
    b = torch.tensor(b)
    u5 = fenchel.t5_preference(b, mask, j)
    return dict(u=u5, w18=fenchel.attention_weights(t, u5, z, 1.0), w20=fenchel.t5_attention(t @ z, b, mask, j),
                dot=torch.softmax(t @ z, 0))


def universe(t, u, names, extras):
    """The universe A: the templates T and the extra ones (u = 0 on those)."""
    ex = extras[["x", "y"]].to_numpy(dtype=float, na_value=np.nan)
    if np.isnan(ex).any():
        raise ValueError(f"extra template {int(np.isnan(ex).any(axis=1).argmax()) + 1} has an empty entry")
    A = torch.cat([t, torch.tensor(ex).reshape(-1, 2)])
    all_names = names + [str(n) for n in extras["template"]]
    return A, all_names, torch.cat([u, torch.zeros(len(ex), dtype=torch.float64)])


def read_cost(A, all_names, cost_kind, where):
    """M between the templates of A: a chosen metric, or the table the user edits (drawn in ``where``)."""
    if cost_kind != "edited":
        return cost_matrix(A, A, "sqeuclidean" if cost_kind == "squared Euclidean" else "euclidean")
    start = pd.DataFrame(cost_matrix(A, A).numpy().round(3), columns=all_names)
    with where:
        edited = ui.table_editor(start, f"cost_{len(all_names)}", hide_index=True)
    M = edited.to_numpy(dtype=float, na_value=np.nan)
    if np.isnan(M).any():
        raise ValueError("the cost matrix has an empty entry")
    return torch.tensor(M)


@ui.fragment
def results():
    """alpha and everything it drives: moving alpha reruns this alone, not the page."""
    alpha = ui.log_slider("alpha (reliability of z)", 1e-2, 1e1, 1.0, key="alpha", where=alpha_slot,
                          help="The weight of the fit term in (4). Small alpha: trust u, h stays near mu, and "
                               "attention (18) is nearly exact. Large alpha: trust mu + z.")
    if templates is None:
        return
    names, t, u = templates
    est = ui.guarded("fenchel/main", lambda: fv.estimates(t, u, z, [alpha]))   # validates u, alpha, z
    if est is None:
        return

    st.subheader("Exact h and its attention approximations (Figure 3)")
    left, right = st.columns([3, 2])
    with left:
        ui.show_figure(figs.estimates(t, u, names, est["mu"], z, est["h"][0], est["h1"][0], est["h2"][0], alpha),
                       key="estimates")
    with right:
        ui.equation(r"\hat h = \sum_i t_i\,\frac{u_i e^{\langle t_i, \lambda^*\rangle}}"
                    r"{\sum_j u_j e^{\langle t_j, \lambda^*\rangle}}\quad(11)\text{-}(12)")
        ui.equation(r"\lambda^* \approx \alpha (I + \alpha\Sigma)^{-1} z\;\;(15)\;\approx\; \alpha z\;\;(16)")
        ui.equation(r"\hat h \approx \sum_i t_i\,\frac{u_i e^{\alpha\langle t_i, z\rangle}}"
                    r"{\sum_j u_j e^{\alpha\langle t_j, z\rangle}}\quad(18)")
        lam = est["lam"][0]
        st.markdown(f"lambda* = ({lam[0]:.4f}, {lam[1]:.4f}), alpha z = ({alpha * z[0]:.4f}, {alpha * z[1]:.4f}); "
                    f"relative deviation ‖lambda* − alpha z‖ / ‖lambda*‖ = **{float(est['deviation'][0]):.4f}** "
                    f"(Sec. 8).")
    st.caption("The red square is the exact estimate (12) from the dual maximiser; the open purple square is "
               "attention (18); the open green diamond uses the second-order lambda of (15). Shrink alpha: all three "
               "move towards mu and merge. Grow alpha: the exact h follows mu + z, while attention can only reach "
               "the hull of the templates with weights tilted by exp(alpha <t_i, z>).")
    gaussian_section(est, alpha)

    view = ui.view_selector("View", VIEWS, key="view",
                            help="The weights of (11) and (18) side by side, the dual problem (9) and how the "
                                 "approximations degrade with alpha, the paper's Figure 3 grid, T5's masks and "
                                 "position biases as a preference, or OT-based attention. The lecture bundle holds "
                                 "them all.")
    lams = dict(exact=est["lam"][0], alpha=alpha, second=est["lam2"][0])
    draw = {VIEWS[0]: lambda: weights_view(t, u, names, lams), VIEWS[1]: lambda: dual_view(t, u, est, alpha),
            VIEWS[2]: lambda: grid_view(t, u, names, est), VIEWS[3]: lambda: t5_view(t, names),
            VIEWS[4]: lambda: ot_view(t, u, names, alpha)}
    # views of several figures are computed once per bundle build, not once per figure
    dual = functools.cache(lambda: dual_figures(t, u, est, alpha))
    ot = functools.cache(lambda: ot_figures(t, u, names, alpha, EXTRAS, 1.0, None))
    bundle = {VIEWS[0]: {"weights": lambda: weights_figure(t, u, names, lams)},
              VIEWS[1]: {"dual": lambda: dual()[0], "sweep": lambda: dual()[1]},
              VIEWS[2]: {"grid": lambda: grid_figure(t, u, names, est)},
              VIEWS[3]: {"t5": lambda: t5_figure(t, names, 0, [names[0]], T5_BIAS)},
              VIEWS[4]: {key: (lambda i=i: ot()[i]) for i, key in enumerate(("ot_map", "ot_bars", "ot_sweep"))}}
    for name in VIEWS:
        if name == view:
            draw[name]()
        else:
            for key, build in bundle[name].items():
                ui.bundle_figure(key, build)


def gaussian_section(est, alpha):
    with st.expander("Sec. 5: a Gaussian preference u = N(mu, I), where (14) is exact"):
        g = fv.gaussian_check(est["mu"], z, alpha)   # inputs already validated above
        solved, closed = g["h"], g["closed"]
        ui.equation(r"\hat h = \frac{1}{1+\alpha}\mu + \frac{\alpha}{1+\alpha} b,\qquad b = \mu + z")
        st.markdown(f"With the mu above, the Newton solver of (9) with the Gaussian log-MGF, started from lambda = "
                    f"0, takes {g['n_iter']} step{'s' if g['n_iter'] != 1 else ''} (gradient norm "
                    f"{g['grad_norm']:.1e}) and gives h = ({solved[0]:.6f}, {solved[1]:.6f}); the closed form gives "
                    f"({closed[0]:.6f}, {closed[1]:.6f}). For a Gaussian the cumulant expansion (13) stops at the "
                    f"quadratic term, so the dual is a quadratic, one Newton step solves it, and (15) is lambda* "
                    f"itself.")


def weights_view(t, u, names, lams):
    ui.show_figure(weights_figure(t, u, names, lams), key="weights")
    st.caption("The exact weights solve (4); attention (18) is softmax(log u_i + alpha <t_i, z>). With uniform u and "
               "alpha = 1 it is dot-product attention.")


def dual_view(t, u, est, alpha):
    dual, sweep = dual_figures(t, u, est, alpha)
    c1, c2 = st.columns(2)
    with c1:
        ui.show_figure(dual, key="dual")
        st.caption("The dual is strongly concave (Hessian −(I/alpha + Cov_p(t))); Newton with that exact Hessian "
                   "finds lambda* to a gradient norm below 1e-10. alpha z is where the quadratic penalty alone would "
                   "put it.")
    with c2:
        ui.show_figure(sweep, key="sweep")
        st.caption("Both errors fall as alpha shrinks: (18) like alpha², the second order (15) faster. The relative "
                   "deviation is the quantity the paper measures in BERT and T5 (Figure 4).")


def grid_view(t, u, names, est):
    ui.show_figure(grid_figure(t, u, names, est), key="grid")
    st.caption("The paper's Figure 3 grid, alpha in {0.1, 0.5, 1, 2, 5}, for the templates and z above: the "
               "approximation is close for alpha up to about 1 while h is still far from mu (so z matters).")


def t5_view(t, names):
    st.subheader("T5: masks and relative positions are a preference (19)-(20)")
    st.caption("Read the templates above as a sequence in table order. Word j is the blank being inferred; masked "
               "words get preference 0, the others exp(b_{j−i}) from the relative-position bias table (offsets "
               "beyond ±3 use the end values, like T5's buckets).")
    t5l, t5r = st.columns([1, 2])
    with t5l:
        j = st.selectbox("Target position j", range(len(names)), format_func=lambda i: f"{i}: {names[i]}",
                         key="t5_j", bind="query-params", help="The word being inferred (the blank).")
        masked = st.multiselect("Masked words", names, default=[names[j]], key="t5_mask",
                                bind="query-params", help="Masked words get u = 0 in (19) and -inf in (20).")
        bias_table = ui.table_editor(T5_BIAS, "t5_bias", disabled=["offset j - i"], hide_index=True)
        ui.equation(r"u(t_i) = \begin{cases} 0 & i \text{ masked}\\ e^{b_{j-i}}/Z & \text{else}\end{cases}\;(19)")
        ui.equation(r"\hat h = \sum_i t_i\,\mathrm{softmax}_i\big(\langle t_i, z\rangle + b_{j-i} + "
                    r"\mathbf 1_{\mathrm{masked}}(i)\big)\;(20)")
    fig = ui.guarded("fenchel/t5", lambda: t5_figure(t, names, j, masked, bias_table))
    if fig is not None:
        with t5r:
            ui.show_figure(fig, key="t5")
            st.caption("The second and third bars are the same numbers: T5's mask and position bias are the log of "
                       "a preference u, so T5 attention is the generalised attention (18).")


def ot_view(t, u, names, alpha):
    st.subheader("OT-based attention: weight spreads to similar templates (Sec. 9, Appendix D)")
    st.caption("The universe A holds the templates T above plus extra ones (say, synonyms placed near some "
               "templates), with u = 0 on the extras. Replacing KL by the entropic OT cost W_gamma(p, u; M) lets p "
               "put weight on them.")
    o1, o2 = st.columns([1, 2])
    with o1:
        extras = ui.table_editor(EXTRAS, "extras", num_rows="dynamic", hide_index=True)
        gamma = ui.log_slider("gamma (entropic regularisation)", 1e-2, 1e1, 1.0, key="gamma", where=st,
                              help="The entropy weight in (23). Small gamma: the true preference (40) is u itself and "
                                   "weight stays on T; large gamma: it spreads over A.")
        cost_kind = st.radio("Cost M", ["squared Euclidean", "Euclidean", "edited"], key="cost_kind", horizontal=True,
                             bind="query-params", help="M(t, t') between the templates of A; 'edited' starts from the "
                                                       "squared Euclidean cost and lets you type your own "
                                                       "(non-negative, symmetric).")

    def compute_ot():
        A, all_names, _ = universe(t, u, names, extras)
        return ot_figures(t, u, names, alpha, extras, gamma, read_cost(A, all_names, cost_kind, o1))

    drawn = ui.guarded("fenchel/ot", compute_ot)
    if drawn is not None:
        ot_map, ot_bars, ot_sweep = drawn
        with o2:
            ui.show_figure(ot_map, key="ot_map")
        ui.equation(r"\tilde u(t) = \sum_{t'} u(t')\frac{e^{-M(t,t')/\gamma}}{\sum_{t''} e^{-M(t',t'')/\gamma}}\;(40)"
                    r"\qquad p^*(t) = \sum_i u_i \frac{e^{(\alpha t^\top z - M(t, t_i))/\gamma}}{Z_i}\;(25)")
        ui.show_figure(ot_bars, key="ot_bars")
        st.caption("Templates outside T get weight from their neighbours in T. (25) replaces lambda* of (39) by alpha "
                   "z; it is close to the exact (38) when alpha and alpha/gamma are small. (Appendix D prints (25) "
                   "again as (47) with t' in the numerator, which would not sum to 1; (25) and (38) agree.)")
        ui.show_figure(ot_sweep, key="ot_sweep")
        st.caption("As gamma -> 0 the true preference (40) returns to u (Prop. 1). The gap between (38) and (25) is "
                   "governed by alpha/gamma: it opens up at small gamma unless alpha is smaller still.")


results()
