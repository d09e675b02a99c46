"""Page "Wasserstein self-attention": weights from distances between distributions (source: note 000)."""
import streamlit as st

from wviz import ui
from wviz.figures import wasserstein_self_attention as figs
from wviz.figures.common import number_text
from wviz.views import wasserstein_self_attention as wv

device = ui.page_setup(
    "Wasserstein self-attention",
    "Read each query and key vector as a *distribution* (a Gaussian, the empirical distribution of its "
    "coordinates, or a small cloud of points) and let the attention weight fall with the Wasserstein distance "
    f"between them, instead of growing with a dot product ({ui.cite('000')}). Small distance, large weight; the "
    "output is still $Y = AV$.",
    try_this=wv.TRY_THIS, keys=wv.Keys,
)
ui.equation(r"\begin{aligned} Q &= XW_Q,\quad K = XW_K,\quad V = XW_V \\"
            r" W_{ij} &= \mathcal{W}(q_i, k_j),\quad A_{ij} = f(W_{ij}),\quad Y = AV \\"
            r" f &= \operatorname{softmax}_j(-W_{ij}/\tau)\ \text{ or }\ \sigma\big((b - W_{ij})/s\big)"
            r" \end{aligned}")

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
preset = sb.selectbox("Sequence", [*wv.PRESETS, wv.UPLOAD], key=wv.Keys.SEQUENCE, bind="query-params",
                      help="The input X: one token per row, d channels per token.")
n = d = upload = None
if preset == wv.UPLOAD:
    upload = sb.file_uploader("Sequence (CSV)", type=["csv"], key=wv.Keys.SEQUENCE_CSV,
                              help=f"n rows (tokens) of d numbers; at most {wv.MAX_ROWS} rows, {wv.MAX_MB} MB; a "
                                   f"header row of names is skipped.")
    with sb:
        ui.example_file("Example sequence (CSV)", wv.example_sequence(), "example_sequence.csv",
                        help="12 tokens of 4 channels with a header row c1..c4: upload it as it is, or edit it.")
else:
    n = sb.slider("n (tokens)", 4, 64, 24, key=wv.Keys.N, bind="query-params", help="Sequence length.")
    d = sb.slider("d (width)", 2, 32, 8, 2, key=wv.Keys.D, bind="query-params",
                  help="Channels per token (even: the Gaussian reading splits it in halves).")
seed = sb.number_input("seed", 0, 2**31 - 1, 0, key=wv.Keys.SEED, bind="query-params",
                       help=r"Seed of the sequence and of $W_Q, W_K, W_V$.")
identity = sb.toggle(r"$W_Q = W_K = W_V = I$", True, key=wv.Keys.IDENTITY, bind="query-params",
                     help="Off: random N(0, 1/d) projections from the seed.")
representation = sb.radio("Read a vector as", list(wv.REPRESENTATIONS), key=wv.Keys.REPRESENTATION,
                          bind="query-params",
                          help=f"gaussian: first half mean, second half log-variance (as in {ui.cite('004')}), "
                               r"$W = W_2^2$. "
                               r"empirical: its coordinates as a 1-D distribution, $W = W_p^p$ by sorting. "
                               r"cloud: k points of dimension d/k, $W$ = exact OT cost.")
p = sb.radio("p (empirical W_p)", [1, 2], key=wv.Keys.P, bind="query-params", horizontal=True,
             disabled=representation != "empirical", help=r"Order $p$ of the 1-D Wasserstein distance $W_p$.")
k = sb.number_input("k (points per cloud)", 1, 32, 2, key=wv.Keys.K, bind="query-params",
                    disabled=representation != "cloud", help="The vector is reshaped to k points of d/k coordinates.")
weight_map = sb.radio("Weight map f", list(wv.WEIGHT_MAPS), key=wv.Keys.WEIGHT_MAP, bind="query-params",
                      horizontal=True,
                      help=r"$\operatorname{softmax}(-W/\tau)$, or the note's sigmoid $\sigma((b - W)/s)$.")
tau_slot = sb.container()  # tau is drawn here by ui.live below
b = sb.slider("b (sigmoid offset)", 0.0, 10.0, 1.0, 0.1, key=wv.Keys.B, bind="query-params",
              disabled=weight_map != "sigmoid", help="Distances below b get weights above 1/2.")
s = sb.slider("s (sigmoid scale)", 0.01, 5.0, 0.5, 0.01, key=wv.Keys.S, bind="query-params",
              disabled=weight_map != "sigmoid", help="Sharpness of the sigmoid.")
normalize = sb.toggle("normalise rows", True, key=wv.Keys.NORMALIZE, bind="query-params",
                      disabled=weight_map != "sigmoid",
                      help="Divide each row of sigmoid weights by its sum, so each output is an average.")


def read_inputs():
    X = wv.sequence(preset, n, d, seed, None if upload is None else upload.getvalue())
    return wv.Inputs(X, None if identity else seed, representation, weight_map, b, s, normalize, k, p)


inputs = ui.guarded("wsa/inputs", read_inputs)


# ---- what tau drives ------------------------------------------------------------------------------------------

def tau_slider(where):
    return ui.log_slider("tau (temperature)", 1e-2, 1e2, 1.0, key=wv.Keys.TAU, where=where,
                         help="Temperature of softmax(-W / tau).")


def draw(a: wv.Attention):
    ui.show_figure(figs.main_figure(a), key="matrices")
    st.caption(matrices_caption(a))
    i = a.inputs
    # The pipeline first: tau does not change it, so a tau move does not send it again (ui.View.live)
    ui.views({wv.Labels.PIPELINE: ui.figure_view("flow", lambda: figs.flow_diagram(i.representation, i.weight_map),
                                                 live=False),
              wv.Labels.OUTPUTS: ui.figure_view("sequences", lambda: figs.sequences(
                  i.X, {"Y (Wasserstein)": a.ours.Y, "Y (dot product)": a.dot.Y}))},
             help="Pipeline: the note's diagram from X to Y. Outputs: the first channels of X and of Y = AV for both "
                  "attentions. The lecture bundle holds both.", key=wv.Keys.VIEW)


def matrices_caption(a: wv.Attention) -> str:
    """What the matrices show, in the numbers of this state (wv.summary)."""
    sm = wv.summary(a)
    if a.inputs.seed is None:
        projections = ("With identity projections every token is compared with itself at distance 0, so the "
                       f"diagonal of A is the largest entry of its row ({sm.on_self} of the {sm.n} rows); the dot "
                       "product instead favours the keys with the largest norm.")
    else:
        projections = ("With random projections a token's query and key are different vectors, so the diagonal of W "
                       f"is not zero: {sm.on_self} of the {sm.n} rows put their largest weight on the token itself.")
    lo, hi = sm.row_sums
    sums = ("every row of A sums to 1" if sm.stochastic else
            f"the rows of A sum to {number_text(lo, 2)} to {number_text(hi, 2)}")
    return (f"{projections} W ranges from {number_text(sm.w_range[0], 2)} to {number_text(sm.w_range[1], 2)}, A's "
            f"entries from {number_text(sm.a_range[0], 2)} to {number_text(sm.a_range[1], 2)}; {sums}.")


ui.live("wsa/run", ui.style.beside_figure(tau_slot), tau_slider,
        lambda tau: None if inputs is None else wv.attend(inputs, tau), draw)
