"""Page "Gaussian W2 attention": tokens as 2-D Gaussians attending by -W2^2 (source: 004)."""
import streamlit as st

from wviz import ui
from wviz.figures import gaussian_w2 as figs
from wviz.views import gaussian_w2 as gv

ui.page_setup(
    "Gaussian W2 attention",
    f"A stochastic Vision Transformer ({ui.cite('004')}) embeds each token as a Gaussian $N(m_i, S_i)$ rather than "
    "a point, and scores a query against a key by minus their squared 2-Wasserstein distance. Two tokens attend to "
    "each other when their means are close **and** their shapes agree; a token that is very uncertain (a wide "
    "covariance) is far from every sharp token.",
    try_this=gv.TRY_THIS, keys=gv.Keys,
)
ui.equation(r"\begin{aligned} W_2^2(q_i, k_j) &= \lVert m_i - m_j\rVert^2 \\"
            r" &\quad + \operatorname{tr}\big(S_i + S_j - 2\,(S_j^{1/2} S_i S_j^{1/2})^{1/2}\big) \\"
            r" A_{ij} &= \operatorname{softmax}_j\big(-W_2^2(q_i, k_j)/\tau\big) \end{aligned}")
st.caption(r"For a query $q_i = N(m_i, S_i)$ and a key $k_j = N(m_j, S_j)$; with diagonal covariances the trace "
           r"term is $\lVert s_i - s_j\rVert^2$, $s$ the standard deviations.")

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
diagonal = sb.radio("Covariance", ["full", "diagonal"], key=gv.Keys.COVARIANCE, bind="query-params", horizontal=True,
                    help=r"Diagonal drops the correlation $\rho$: $W_2^2$ becomes "
                         r"$\lVert m_1 - m_2\rVert^2 + \lVert s_1 - s_2\rVert^2$.") \
    == "diagonal"
equal = sb.toggle("Equal covariances", False, key=gv.Keys.EQUAL_COVARIANCES, bind="query-params",
                  help="Give every token the query's covariance: the covariance part of W2^2 vanishes and only the "
                       "means matter.")
tau_slot = sb.container()  # tau is drawn here by ui.live below

st.subheader("Tokens")
st.caption(r"One Gaussian per row: mean $(x, y)$, standard deviations $\sigma_x, \sigma_y$ and correlation $\rho$. "
           "The sliders in the sidebar set the selected query token (starting from its row); the table sets the "
           "others.")
table = ui.table_editor(gv.DEFAULT, gv.Keys.TOKENS, num_rows="dynamic", hide_index=True)


def query_slider(label, lo, hi, value, step, key, **kw):
    """A slider bound to the URL whose range is widened (never the value clipped) to hold the table's value."""
    lo, hi = gv.slider_range(lo, hi, value)
    return sb.slider(label, lo, hi, value, step, key=key, bind="query-params", **kw)


def read_scene():
    """The tokens of the table, the selected query's row replaced by the sliders."""
    tokens = gv.tokens_from_table(table, diagonal)  # every row valid, the query's too: its values start the sliders
    names = tokens.names
    q = sb.selectbox("Query token", range(len(names)), format_func=lambda i: names[i], key=gv.Keys.QUERY,
                     bind="query-params", help="The token whose weights, W2^2 split and sweep are shown.")
    mx, my, sx, sy, rho = gv.query_row(tokens, q)
    key = query_keys(q)
    row = [
        query_slider("mean x", -3.0, 3.0, mx, 0.05, key["x"], help="m_x of the query."),
        query_slider("mean y", -3.0, 3.0, my, 0.05, key["y"], help="m_y of the query."),
        query_slider("sigma_x", 0.0, 2.0, sx, 0.01, key["sigma_x"], help="Standard deviation along x (0 is a point "
                                                                          "mass along x)."),
        query_slider("sigma_y", 0.0, 2.0, sy, 0.01, key["sigma_y"], help="Standard deviation along y."),
        query_slider("rho", -1.0, 1.0, rho, 0.01, key["rho"], disabled=diagonal,
                     help="Correlation of x and y (full covariance only)."),
    ]
    tokens = gv.with_query(tokens, q, row)
    return gv.scene(gv.equal_covariances(tokens, q) if equal else tokens, q)


def query_keys(query: int) -> dict[str, str]:
    """The widget keys of the sliders that set token ``query``'s row, by its gv.COLUMNS name (a key per token, so that
    each token keeps its own values in the URL)."""
    keys = (gv.Keys.MEAN_X, gv.Keys.MEAN_Y, gv.Keys.SIGMA_X, gv.Keys.SIGMA_Y, gv.Keys.RHO)
    return dict(zip(gv.COLUMNS, (key.format(query) for key in keys)))


def query_sliders(s: gv.Scene) -> dict:
    """The sliders of the query's row, which the figures follow while they move."""
    return {name: ui.Slider(key) for name, key in query_keys(s.query).items()}


def live_inputs(s: gv.Scene) -> dict:
    return {**gv.live_inputs(s, equal), "traces": figs.token_traces(len(s.tokens.names))}


scene = ui.guarded("gaussian/tokens", read_scene)
if scene is not None:  # the last good scene, when the table above is being fixed
    ui.show_figure(figs.token_ellipses(scene.tokens.means, scene.ellipses, scene.tokens.names, scene.query),
                   key="ellipses")
    n_drawn = 2 * gv.ELLIPSE_POINTS * (len(scene.tokens.names) if equal else 1)
    if not ui.follow("ellipses", "ellipses", query_sliders(scene), gv.query_values(scene), live_inputs(scene),
                     entries=n_drawn):
        st.caption(f"The ellipses move when a slider is released: {len(scene.tokens.names)} tokens with the query's "
                   "covariance are more than the browser redraws within a frame.")


# ---- what tau drives ------------------------------------------------------------------------------------------

def tau_slider(where):
    return ui.log_slider("tau (temperature)", 1e-2, 1e2, 1.0, key=gv.Keys.TAU, where=where, per_decade=24,
                         help="softmax(-W2^2 / tau): small tau attends to the nearest Gaussian only.")


def draw(a: gv.Attention):
    ui.show_figure(figs.main_figure(a), key="pair")
    n = len(a.scene.tokens.names)
    sliders = {"tau": ui.Slider(gv.Keys.TAU, ui.log_grid(gv.Keys.TAU)), **query_sliders(a.scene)}
    if not ui.follow("pair", "gaussians", sliders, gv.live_values(a), live_inputs(a.scene), entries=2 * n * n):
        st.caption(f"The heatmaps change when a slider is released: {n} tokens are more than the browser redraws "
                   "within a frame.")
    ui.views({gv.Labels.WEIGHTS: weights_view(a), gv.Labels.SWEEP: sweep_view(a),
              gv.Labels.SIDE_BY_SIDE: side_view(a), gv.Labels.CLICK: linked_view(a)},
             help="The query's weights with its W2^2 split into mean and shape parts; its weights as one token's "
                  "covariance is scaled from 0.01 to 100; W2 attention at two temperatures; or the W2 heatmap where "
                  "a click on a row shows that query's weights. The lecture bundle holds the Plotly figures of all.",
             key=gv.Keys.VIEW)


def weights_figures(a: gv.Attention):
    s = a.scene
    names, q = s.tokens.names, s.query
    return [figs.query_weights({"W2": a.w2[q], "dot product": a.dot[q]}, names, names[q]),
            figs.w2_parts(s.mean_part, s.cov_part, names, names[q])]


def weights_view(a: gv.Attention) -> ui.View:
    def draw_view():
        for column, fig, key in zip(st.columns(2), weights_figures(a), ("query_bars", "parts")):
            with column:
                ui.show_figure(fig, key=key)
        st.caption("The dot product of the means ignores the covariances entirely and favours long vectors; W2 "
                   "attention favours the key whose mean is closest and whose shape matches the query's.")

    return ui.View(draw_view, ("query_bars", "parts"), lambda: weights_figures(a))


def sweep_figure(a: gv.Attention, token: int):
    names = a.scene.tokens.names
    return figs.covariance_sweep(gv.SCALES, gv.sweep(a, token), names, names[token])


def sweep_view(a: gv.Attention) -> ui.View:
    names = a.scene.tokens.names
    default_token = min(1, len(names) - 1)

    def draw_view():
        options = gv.unique_names(names)  # by name, as the URL holds it (a Try link sets it by name)
        token = options.index(st.selectbox("Token to widen", options, index=default_token, key=gv.Keys.SWEEP_TOKEN,
                                           bind="query-params",
                                           help="Its covariance is multiplied by a factor from 0.01 to 100."))
        fig = ui.guarded("gaussian/sweep", lambda: sweep_figure(a, token))
        if fig is not None:
            ui.show_figure(fig, key="sweep")
            st.caption("Each key has its own colour and dash: where two keys get nearly the same weight (t2 and t4 "
                       "from about 0.3 to 2 at the defaults), the line on top shows the other's colour in its gaps.")

    return ui.View(draw_view, ("sweep",), lambda: [sweep_figure(a, default_token)])


def side_figure(s: gv.Scene, tau: float):
    return figs.attention_heatmap(gv.attend(s, tau).w2, s.tokens.names, f"W2 attention at τ = {tau:g}")


def side_view(a: gv.Attention) -> ui.View:
    return ui.side_by_side(
        "tau", gv.Keys.SIDE_TAU, 1e-2, 1e2, gv.SIDE_TAUS, lambda side, tau: side_figure(a.scene, tau),
        help="The temperature of the {side} heatmap.",
        caption="The same tokens at two temperatures: a small tau keeps only the nearest Gaussian in each row, a "
                "large one spreads every row towards uniform.")


def linked_view(a: gv.Attention) -> ui.View:
    def draw_view():
        names = gv.unique_names(a.scene.tokens.names)
        ui.show_chart(figs.linked_weights(gv.weights_table(a), names, names[a.scene.query]), key="linked")
        st.caption("Click a row of the heatmap: the bars below show that query's weights under W2 and dot-product "
                   "attention, picked in your browser (no recomputation).")

    return ui.View(draw_view, (), list)


ui.live("gaussian/attention", ui.style.beside_figure(tau_slot), tau_slider,
        lambda tau: None if scene is None else gv.attend(scene, tau),
        draw)
