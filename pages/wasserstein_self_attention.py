"""Page "Wasserstein self-attention": weights from distances between distributions (source: the 000 note)."""
import streamlit as st

from wviz import io, samples, ui, wsa
from wviz.figures import wasserstein_self_attention as figs

device = ui.page_setup(
    "Wasserstein self-attention",
    "Read each query and key vector as a *distribution* (a Gaussian, the empirical distribution of its "
    "coordinates, or a small cloud of points) and let the attention weight fall with the Wasserstein distance "
    "between them, instead of growing with a dot product (the 000 note). Small distance, large weight; the output "
    "is still $Y = AV$.",
)
ui.equation(r"Q = XW_Q,\; K = XW_K,\; V = XW_V,\qquad W_{ij} = \mathcal{W}(q_i, k_j),\qquad A_{ij} = f(W_{ij}),"
         r"\qquad Y = AV")

sb = st.sidebar
preset = sb.selectbox("Sequence", [*samples.SEQUENCES, "uploaded CSV"], key="sequence", bind="query-params",
                      help="The input X: one token per row, d channels per token.")
if preset == "uploaded CSV":
    upload = sb.file_uploader("Sequence (CSV)", type=["csv"], key="sequence_csv",
                              help=f"n rows (tokens) of d numbers; at most {io.MAX_POINTS} rows, "
                                   f"{io.MAX_UPLOAD_BYTES // 2**20} MB; a header row of names is skipped.")
else:
    n = sb.slider("n (tokens)", 4, 64, 24, key="n", bind="query-params", help="Sequence length.")
    d = sb.slider("d (width)", 2, 32, 8, 2, key="d", bind="query-params",
                  help="Channels per token (even: the Gaussian reading splits it in halves).")
seed = sb.number_input("seed", 0, 2**31 - 1, 0, key="seed", bind="query-params",
                       help="Seed of the sequence and of W_Q, W_K, W_V.")
identity = sb.toggle("W_Q = W_K = W_V = identity", True, key="identity", bind="query-params",
                     help="Off: random N(0, 1/d) projections from the seed.")
representation = sb.radio("Read a vector as", ["gaussian", "empirical", "cloud"], key="representation",
                          bind="query-params",
                          help="gaussian: first half mean, second half log-variance (as in 004), W = W2^2. "
                               "empirical: its coordinates as a 1-D distribution, W = W_p^p by sorting. "
                               "cloud: k points of dimension d/k, W = exact OT cost.")
p = sb.radio("p (empirical W_p)", [1, 2], key="p", bind="query-params", horizontal=True,
             disabled=representation != "empirical", help="Order of the 1-D Wasserstein distance.")
k = sb.number_input("k (points per cloud)", 1, 32, 2, key="k", bind="query-params",
                    disabled=representation != "cloud", help="The vector is reshaped to k points of d/k coordinates.")
weight_map = sb.radio("Weight map f", ["softmax", "sigmoid"], key="weight_map", bind="query-params",
                      horizontal=True, help="softmax(-W / tau), or the note's sigmoid((b - W) / s).")
tau_slot = sb.container()  # tau is drawn here by the fragment below, which a tau move reruns alone
b = sb.slider("b (sigmoid offset)", 0.0, 10.0, 1.0, 0.1, key="b", bind="query-params",
              disabled=weight_map != "sigmoid", help="Distances below b get weights above 1/2.")
s = sb.slider("s (sigmoid scale)", 0.01, 5.0, 0.5, 0.01, key="s", bind="query-params",
              disabled=weight_map != "sigmoid", help="Sharpness of the sigmoid.")
normalize = sb.toggle("normalise rows", True, key="normalize", bind="query-params", disabled=weight_map != "sigmoid",
                      help="Divide each row of sigmoid weights by its sum, so each output is an average.")


def compute(tau):
    if preset == "uploaded CSV":
        if upload is None:
            raise ValueError("upload a CSV sequence (n rows of d numbers), or choose a preset")
        X = io.read_matrix_csv(upload.getvalue(), "sequence")
    else:
        X = samples.sequence(preset, n, d, seed)
    W_Q, W_K, W_V = samples.projections(X.shape[-1], None if identity else seed)
    ours = wsa.wasserstein_self_attention(X, W_Q, W_K, W_V, representation=representation, weight_map=weight_map,
                                          tau=tau, b=b, s=s, normalize=normalize, k=int(k), p=int(p))
    return dict(X=X, ours=ours, dot=wsa.dot_product_attention(X, W_Q, W_K, W_V))


@ui.fragment
def results():
    """tau and everything it drives: moving tau reruns this alone, not the page."""
    tau = ui.log_slider("tau", 1e-2, 1e2, 1.0, key="tau", where=tau_slot, help="Temperature of softmax(-W / tau).")
    res = ui.guarded("wsa/run", lambda: compute(tau))
    if res is None:
        return
    ours, dot = res["ours"], res["dot"]

    ui.show_figure(figs.matrices({"distances W": ours.W, "Wasserstein attention A": ours.A,
                                  "softmax(QK^T / sqrt(d))": dot.A}, "Distances and weights (rows: queries)"),
                   key="matrices")
    st.caption("With identity projections every token is compared with itself at distance 0, so the diagonal of A is "
               "its largest entry in each row; the dot product instead favours the keys with the largest norm.")

    VIEWS = {"Outputs along the sequence": ("sequences", lambda: figs.sequences(
                 res["X"], {"Y (Wasserstein)": ours.Y, "Y (dot product)": dot.Y})),
             "The pipeline": ("flow", lambda: figs.flow_diagram(representation, weight_map))}
    view = ui.view_selector("View", list(VIEWS), key="view",
                            help="Outputs: the first channels of X and of Y = AV for both attentions. Pipeline: the "
                                 "note's diagram from X to Y. The lecture bundle holds both.")
    for name, (key, build) in VIEWS.items():
        if name == view:
            ui.show_figure(build(), key=key)
        else:
            ui.bundle_figure(key, build)


results()
