"""Page "Gaussian W2 attention": tokens as 2-D Gaussians attending by -W2^2 (source: 004, INDEX.md)."""
import re

import numpy as np
import pandas as pd
import streamlit as st
import torch

from wviz import gaussian, ui
from wviz.views import gaussian_w2 as gv
from wviz.figures import gaussian_w2 as figs

device = ui.page_setup(
    "Gaussian W2 attention",
    "A stochastic Vision Transformer (the 004 paper) embeds each token as a Gaussian $N(m_i, S_i)$ rather than a "
    "point, and scores a query against a key by minus their squared 2-Wasserstein distance. Two tokens attend to "
    "each other when their means are close **and** their shapes agree; a token that is very uncertain (a wide "
    "covariance) is far from every sharp token.",
)
ui.equation(r"W_2^2\big(N(m_1,S_1), N(m_2,S_2)\big) = \lVert m_1 - m_2\rVert^2 + "
         r"\operatorname{tr}\!\big(S_1 + S_2 - 2\,(S_2^{1/2} S_1 S_2^{1/2})^{1/2}\big),\qquad "
         r"A_{ij} = \operatorname{softmax}_j\!\big(-W_2^2(q_i, k_j)/\tau\big)")

DEFAULT = pd.DataFrame({
    "token": ["t1", "t2", "t3", "t4", "t5"],
    "x": [0.0, 1.0, -0.8, 0.2, 1.5], "y": [0.0, 0.2, 0.9, -1.0, 1.2],
    "sigma_x": [0.5, 0.3, 0.6, 0.2, 1.0], "sigma_y": [0.5, 0.8, 0.2, 0.2, 0.4],
    "rho": [0.0, 0.5, -0.3, 0.0, 0.7],
})

sb = st.sidebar
diagonal = sb.radio("Covariance", ["full", "diagonal"], key="cov_kind", bind="query-params", horizontal=True,
                    help="Diagonal drops the correlation rho: W2^2 becomes ||m1 - m2||^2 + ||s1 - s2||^2.") \
    == "diagonal"
tau_slot = sb.container()  # tau is drawn here by the fragment below, which a tau move reruns alone

st.subheader("Tokens")
st.caption("One Gaussian per row: mean (x, y), standard deviations sigma_x, sigma_y and correlation rho. The "
           "sliders in the sidebar set the selected query token (starting from its row); the table sets the others.")
table = ui.table_editor(DEFAULT, "tokens", num_rows="dynamic", hide_index=True)
names = [f"t{i + 1}" if pd.isna(t) or not str(t).strip() else str(t) for i, t in enumerate(table["token"])]


def named(fn, *args):
    """fn(*args), its ValueError naming tokens as the table does: the library counts from 0 like a tensor index
    ("token 2"), the table's rows are t1, t2, ... (the library's token 2 is the table's t3)."""
    try:
        return fn(*args)
    except ValueError as err:
        msg = re.sub(r"\btoken (\d+)\b",
                     lambda m: f"token {names[int(m[1])]}" if int(m[1]) < len(names) else m[0], str(err))
        raise ValueError(msg) from None


def covariances(v):
    """The table's (n, 5) numbers as means (n, 2) and covariances ((n, 2, 2) full or (n, 2) variances); the library
    rejects a negative sigma or |rho| > 1 (also in diagonal mode, where rho is then dropped)."""
    v = torch.tensor(v, dtype=torch.float64)
    means = v[:, :2]
    covs = named(gaussian.gaussian_from_params, means, v[:, 2], v[:, 3], v[:, 4])
    if diagonal:
        covs = torch.diagonal(covs, dim1=-2, dim2=-1)  # the variances (sigma_x^2, sigma_y^2), rho dropped
    return means, covs


def slider(label, lo, hi, value, step, key, **kw):
    """A slider bound to the URL whose range is widened (never the value clipped) to hold the table's value."""
    return sb.slider(label, float(min(lo, np.floor(value))), float(max(hi, np.ceil(value))), float(value), step,
                     key=key, bind="query-params", **kw)


def read_tokens():
    """Means and covariances from the table, the selected query's row replaced by the sliders."""
    if len(table) < 2:
        raise ValueError("add at least two tokens to the table")
    values = table[["x", "y", "sigma_x", "sigma_y", "rho"]].to_numpy(dtype=float, na_value=np.nan).copy()
    if np.isnan(values).any():
        raise ValueError(f"token {names[int(np.isnan(values).any(axis=1).argmax())]} has an empty entry")
    covariances(values)  # every row valid, the query's too: its values start the sliders
    q = sb.selectbox("Query token", range(len(names)), format_func=lambda i: names[i], key="query", bind="query-params",
                     help="The token whose weights, W2^2 split and sweep are shown.")
    row = values[q]
    values[q] = [
        slider("mean x", -3.0, 3.0, row[0], 0.05, f"mx_{q}", help="m_x of the query."),
        slider("mean y", -3.0, 3.0, row[1], 0.05, f"my_{q}", help="m_y of the query."),
        slider("sigma_x", 0.0, 2.0, row[2], 0.01, f"sx_{q}", help="Standard deviation along x (0 is a point mass "
                                                                  "along x)."),
        slider("sigma_y", 0.0, 2.0, row[3], 0.01, f"sy_{q}", help="Standard deviation along y."),
        slider("rho", -1.0, 1.0, row[4], 0.01, f"rho_{q}", disabled=diagonal,
               help="Correlation of x and y (full covariance only)."),
    ]
    return q, *covariances(values)


def compute():
    """Everything that does not depend on tau (the fragment below computes the attention)."""
    q, means, covs = read_tokens()
    full_covs = torch.diag_embed(covs) if diagonal else covs
    return named(lambda: dict(
        names=names, q=q, means=means, covs=covs,
        split=gv.w2_split(means, covs, q),
        ellipses={k: torch.stack([gaussian.ellipse(m, S, k, 100) for m, S in zip(means, full_covs)])
                  for k in (1, 2)},
    ))


res = ui.guarded("gaussian/tokens", compute)
if res is not None:
    names, q = res["names"], res["q"]  # the last good result's, when the table above is being fixed
    ui.show_figure(figs.token_ellipses(res["means"], res["ellipses"], names, q), key="ellipses")
SCALES = torch.logspace(-2, 2, 81, dtype=torch.float64)


@ui.fragment
def results():
    """tau and everything it drives: moving tau reruns this alone, not the page."""
    tau = ui.log_slider("tau (temperature)", 1e-2, 1e2, 1.0, key="tau", where=tau_slot,
                        help="softmax(-W2^2 / tau): small tau attends to the nearest Gaussian only.")
    if res is None:  # tau is drawn all the same: it keeps its value (and its place in the link) meanwhile
        return
    means, covs = res["means"], res["covs"]
    att = ui.guarded("gaussian/attention", lambda: named(lambda: dict(
        w2=gaussian.w2_attention(means, covs, means, covs, tau), dot=gv.dot_attention(means, tau))))
    if att is None:
        return
    ui.show_figure(figs.attention_pair(att["w2"], att["dot"], names, ("W2 attention softmax(-W2^2 / tau)",
                                                                      "dot-product softmax(<m_i, m_j> / tau)")),
                   key="pair")

    def query_bars():
        return figs.query_weights({"W2": att["w2"][q], "dot product": att["dot"][q]}, names, names[q])

    def sweep_figure(token):
        sweep = named(gv.covariance_sweep, means, covs, q, token, SCALES, tau)
        return figs.covariance_sweep(SCALES, sweep, names, names[token])

    views = ["The query's weights", "Sweep: one token grows uncertain"]
    view = ui.view_selector("View", views, key="view",
                            help="The query's weights with its W2^2 split into mean and shape parts, or its "
                                 "weights as one token's covariance is scaled from 0.01 to 100. The lecture "
                                 "bundle holds both.")
    parts = lambda: figs.w2_parts(*res["split"], names, names[q])  # noqa: E731
    if view == views[0]:
        c1, c2 = st.columns(2)
        with c1:
            ui.show_figure(query_bars(), key="query_bars")
        with c2:
            ui.show_figure(parts(), key="parts")
        st.caption("The dot product of the means ignores the covariances entirely and favours long vectors; W2 "
                   "attention favours the key whose mean is closest and whose shape matches the query's.")
    else:
        ui.bundle_figure("query_bars", query_bars)
        ui.bundle_figure("parts", parts)
    default_token = min(1, len(names) - 1)
    if view == views[1]:
        token = st.selectbox("Token to widen", range(len(names)), format_func=lambda i: names[i],
                             index=default_token, key="sweep_token", bind="query-params",
                             help="Its covariance is multiplied by a factor from 0.01 to 100.")
        fig = ui.guarded("gaussian/sweep", lambda: sweep_figure(token))
        if fig is not None:
            ui.show_figure(fig, key="sweep")
    else:
        ui.bundle_figure("sweep", lambda: sweep_figure(default_token))


results()
