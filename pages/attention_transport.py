"""Page "Attention as transport": softmax, sparsemax, entmax and prior-softmax as argmins of -<s, p> + tau Omega(p)."""
import time

import numpy as np
import pandas as pd
import streamlit as st
import torch

from wviz import attention_views as av
from wviz import ui
from wviz.attention import entropy, support_size
from wviz.figures import attention as figs
from wviz.figures.common import pool_for_display, to_numpy

OMEGA_TEX = {
    "softmax": r"\sum_j p_j \log p_j",
    "sparsemax": r"\tfrac12 \lVert p \rVert^2",
    "entmax": r"\frac{\sum_j p_j^{\alpha} - 1}{\alpha(\alpha - 1)}",
    "prior-softmax": r"\mathrm{KL}(p \,\Vert\, \pi)",
}

device = ui.page_setup(
    "Attention as regularised transport",
    "A query spreads one unit of attention over m keys. Paying the cost $C_j = -\\langle q, k_j \\rangle$ per "
    "unit sent to key $j$, the cheapest plan puts everything on the best key (argmax). Adding a regulariser "
    "$\\tau\\,\\Omega(p)$ spreads the mass: with the negative entropy the optimum is exactly softmax "
    "(one-sided entropic optimal transport, eqs. (4)-(5) of the 001 note); other regularisers give sparsemax, "
    "entmax and prior-softmax (eq. (13) and its table).",
)
ui.equation(r"p^\star = \arg\min_{p \in \Delta^{m-1}} \; -\langle s, p \rangle + \tau\, \Omega(p),"
         r"\qquad s_j = \langle q, k_j \rangle")

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
source = sb.radio("Query and keys", ["2-D points", "random", "typed scores"], key="source",
                  bind="query-params",
                  help="2-D points: edit a query and keys in tables. Random: Gaussian q and k_j in R^d. "
                       "Typed scores: enter s_j directly.")
tau_slot = sb.container()  # tau is drawn here by the fragment below, which a tau move reruns alone
mechanisms = sb.multiselect("Mechanisms", list(av.MECHANISMS), default=["softmax", "sparsemax", "entmax"],
                            key="mechanisms", bind="query-params",
                            help="Each is the argmin of the same objective with a different regulariser Omega.")
alpha = sb.slider("alpha (entmax)", 1.0, 2.0, 1.5, 0.05, key="alpha", bind="query-params",
                  disabled="entmax" not in mechanisms,
                  help="Tsallis entropy index: alpha = 1 is softmax, alpha = 2 is sparsemax.")


def read_scores():
    """The score vector s (m,) from the chosen source; raises ValueError on bad input."""
    if source == "2-D points":
        c1, c2 = sb.columns(2)
        qx = c1.number_input("query x", value=1.0, step=0.1, key="qx", bind="query-params",
                             help="First coordinate of q.")
        qy = c2.number_input("query y", value=0.3, step=0.1, key="qy", bind="query-params",
                             help="Second coordinate of q.")
        default = pd.DataFrame({"x": [1.0, 0.2, -0.8], "y": [0.2, 1.0, -0.4]})
        sb.caption("Keys k_j, one per row; add or delete rows to change m.")
        keys = ui.table_editor(default, "keys_table", where=sb, num_rows="dynamic")
        if len(keys) == 0:
            raise ValueError("add at least one key to the table")
        k = torch.tensor(keys[["x", "y"]].to_numpy(dtype=float, na_value=np.nan), dtype=torch.float64)
        if torch.isnan(k).any():
            row = int(torch.isnan(k).any(dim=1).nonzero()[0]) + 1
            raise ValueError(f"key {row} has an empty or non-numeric coordinate")
        return av.dot_scores(torch.tensor([qx, qy], dtype=torch.float64), k).squeeze(-1)
    if source == "random":
        m = sb.slider("m (keys)", 2, 64, 6, key="m", bind="query-params", help="Number of keys.")
        d = sb.slider("d (dimension)", 1, 64, 4, key="d", bind="query-params", help="Dimension of q and k_j.")
        seed = sb.number_input("seed", 0, 2**31 - 1, 0, key="seed", bind="query-params",
                               help="Seed of the random query and keys.")
        q, k = av.random_queries_keys(1, m, d, seed, dtype=torch.float64)
        return av.dot_scores(q[0], k).squeeze(-1)
    text = sb.text_input("scores s_j", "2.0, 1.0, 0.5", key="scores", bind="query-params",
                         help="Comma- or space-separated numbers; -inf masks a key.")
    return torch.tensor(ui.parse_numbers(text, "score"), dtype=torch.float64)


def read_prior(m: int):
    """The prior pi over the m keys from its editor (shown only when prior-softmax is chosen)."""
    if "prior-softmax" not in mechanisms:
        return None
    sb.caption("Prior pi over the keys for prior-softmax: non-negative, summing to 1; a zero masks a key.")
    table = ui.table_editor(pd.DataFrame({"key": [f"k{j + 1}" for j in range(m)], "prior": [1.0 / m] * m}),
                            f"prior_table_{m}", where=sb, disabled=["key"], hide_index=True)
    return torch.tensor(table["prior"].to_numpy(dtype=float, na_value=np.nan), dtype=torch.float64)


def read_inputs():
    """The scores s, the prior and the mechanisms, from the controls above; raises ValueError on bad input."""
    if not mechanisms:
        raise ValueError("choose at least one mechanism")
    s = read_scores()
    return dict(scores=s, prior=read_prior(s.shape[-1]), mechanisms=mechanisms, alpha=alpha)


inputs = ui.guarded("attention/inputs", read_inputs)


@st.cache_data(max_entries=16, show_spinner=False)
def many_queries(mechanism, n, m, d, seed, tau, alpha, device_name):
    q, k = av.random_queries_keys(n, m, d, seed, device=device_name)
    t0 = time.perf_counter()
    p = av.attend(mechanism, av.dot_scores(q, k), tau, alpha,
                  torch.full((m,), 1.0 / m, device=device_name) if mechanism == "prior-softmax" else None)
    if p.is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    pooled, bn, bm = pool_for_display(p)
    return pooled, (bn, bm), seconds, float(support_size(p).float().mean())


TAUS = torch.logspace(-3, 3, 121, dtype=torch.float64)


@ui.fragment
def results():
    """tau and everything it drives: moving tau reruns this alone, not the page."""
    tau = ui.log_slider("tau (temperature)", 1e-3, 1e2, 1.0, key="tau", where=tau_slot,
                        help="Weight of the regulariser. tau -> 0 gives argmax, tau -> infinity the uniform "
                             "distribution (or the prior). Transformers use tau = sqrt(d).")
    if inputs is None:
        return
    mechanisms, alpha = inputs["mechanisms"], inputs["alpha"]

    def compute_one():
        s, prior = inputs["scores"], inputs["prior"]
        weights = {name: av.attend(name, s, tau, alpha, prior) for name in mechanisms}
        return dict(scores=s, prior=prior, weights=weights, tau=tau, alpha=alpha)

    one = ui.guarded("attention/one", compute_one)
    if one is None:
        return

    s, prior, weights = one["scores"], one["prior"], one["weights"]
    m = s.shape[-1]
    labels = [f"k{j + 1}" for j in range(m)]

    # ---- weights of every mechanism ------------------------------------------------------------------------------
    st.subheader("Weights")
    ui.show_figure(figs.weights_bars(weights, labels), key="bars")
    numbers = st.container()  # filled at the end
    # ---- landscape, sweep, many queries: one view at a time ------------------------------------------------------
    def landscape_figure(which):
        land = av.landscape(which, s, one["tau"], one["alpha"], prior)
        return land, figs.simplex_landscape(land, labels, f"{which}: -<s, p> + tau Omega(p)")

    def sweep_figure(which):
        sweep = av.tau_sweep(which, s, TAUS, one["alpha"], prior)
        return figs.tau_sweep_lines(TAUS, sweep, labels, one["tau"], f"{which}: weights against tau")

    def many_figure(mech, n_q, m_k, d_k):
        pooled, block, seconds, mean_support = many_queries(mech, n_q, m_k, d_k, 0, one["tau"], one["alpha"],
                                                            str(device))
        return figs.attention_heatmap(pooled, f"{mech}, tau = {one['tau']:.3g}", block), seconds, mean_support

    VIEWS = ["Objective on the simplex (m = 3)", "tau sweep", "Many queries"]
    view = ui.view_selector("View", VIEWS, key="view",
                            help="The objective over the simplex (three keys), each weight as tau goes from 1e-3 to "
                                 "1e3, or many random queries at once. The lecture bundle holds all three.")
    first = mechanisms[0]
    if view == VIEWS[0]:
        if m != 3:
            st.info(f"The landscape is drawn for exactly 3 keys (the 2-simplex); there are {m} now. Use the "
                    "2-D points table with three rows or type three scores.")
        else:
            which = st.selectbox("Mechanism", mechanisms, key="land_mech", bind="query-params",
                                 help="Whose objective -<s, p> + tau Omega(p) to draw.")
            drawn = ui.guarded("attention/land", lambda: landscape_figure(which))
            if drawn is not None:
                land, fig = drawn
                ui.show_figure(fig, key="land")
                st.markdown(
                    f"Closed form objective **{land.closed_value:.6f}**, generic solver (interior-point Newton, no "
                    f"closed form) **{land.numerical_value:.6f}**; the two points differ by "
                    f"{float((land.closed_form - land.numerical).abs().max()):.1e}.")
    elif m == 3:
        ui.bundle_figure("land", lambda: landscape_figure(first)[1])

    if view == VIEWS[1]:
        which = st.selectbox("Mechanism", mechanisms, key="sweep_mech", bind="query-params",
                             help="Whose weights to follow from tau = 1e-3 to 1e3.")
        fig = ui.guarded("attention/sweep", lambda: sweep_figure(which))
        if fig is not None:
            ui.show_figure(fig, key="sweep")
            st.caption("Small tau: all mass on the largest score (argmax, the unregularised transport plan). "
                       "Large tau: the regulariser wins and the weights go to uniform (or to the prior).")
    else:
        ui.bundle_figure("sweep", lambda: sweep_figure(first))

    SIZES = [16, 64, 256, 1024, 2048, 4096]
    if view == VIEWS[2]:
        st.markdown("n random queries against m random keys: each row of the heatmap is one query's weights.")
        c = st.columns(4)
        n_q = c[0].select_slider("n (queries)", SIZES, 256, key="many_n", bind="query-params",
                                 help="Number of queries (rows).")
        m_k = c[1].select_slider("m (keys)", SIZES, 256, key="many_m", bind="query-params",
                                 help="Number of keys (columns).")
        d_k = c[2].slider("d", 1, 128, 16, key="many_d", bind="query-params", help="Dimension of q and k.")
        mech = c[3].selectbox("Mechanism", list(av.MECHANISMS), key="many_mech", bind="query-params",
                              help="prior-softmax uses a uniform prior here.")
        with st.spinner(f"Computing {n_q} x {m_k} weights on {device}..."):
            res = ui.guarded("attention/many", lambda: many_figure(mech, n_q, m_k, d_k))
        if res is not None:
            fig, seconds, mean_support = res
            ui.show_figure(fig, key="many")
            st.caption(f"Computed in {seconds * 1e3:.1f} ms on {device}; mean support size "
                       f"{mean_support:.1f} of {m_k} keys.")
    else:
        ui.bundle_figure("many", lambda: many_figure("softmax", 256, 256, 16)[0])

    # ---- the numbers behind the bars, in their place below the bars but sent last: the browser draws the
    # bars before it typesets these (measured: bench/bench_latency.py) -------------------------------------------
    with numbers:
        summary = pd.DataFrame({
            "mechanism": list(weights),
            "support size": [int(support_size(p)) for p in weights.values()],
            "entropy (nats)": [float(entropy(p)) for p in weights.values()],
            "objective": [float(av.objective(n, p, s, one["tau"], one["alpha"], prior)) for n, p in weights.items()],
        })
        st.dataframe(summary, hide_index=True)

        fmt = lambda v: ", ".join(f"{x:.3g}" for x in to_numpy(v))  # noqa: E731
        ui.equation(rf"s = ({fmt(s)}),\quad \tau = {one['tau']:.3g}")
        for name, p in weights.items():
            ui.equation(rf"\text{{{name}}}:\ \Omega(p) = {OMEGA_TEX[name]},\quad p^\star = ({fmt(p)})")


results()
