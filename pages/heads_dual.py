"""Page "Heads solve the dual": Sec. 8 / Figure 4 of 002 on an encoder (the bundled all-MiniLM-L6-v2, a model folder
of WVIZ_MODELS or an uploaded .zip): how far each head's attention is from the exact solution of problem (4), live on
one sentence while alpha moves, and over the bundled corpus (Figure 4) in the background."""
import streamlit as st

from wviz import ui
from wviz.figures import heads_dual as figs
from wviz.views import heads_dual as hv

device = ui.page_setup(
    "Heads solve the dual",
    f"The {ui.cite('002')} reads every attention head as the solver of problem (4): find a distribution $p$ over "
    "the templates $t_i$, close to a preference $u$, whose mean is close to $\\mu + z$, where $\\alpha$ is the "
    "reliability of the evidence $z$. Its Fenchel dual (9) has a maximiser $\\lambda^*$; approximating "
    "$\\lambda^* \\approx \\alpha z$ (16) turns the exact answer (12) into the attention formula (18). For BERT-type "
    "heads, $t_i = x_i/\\sqrt{d'}$, $z = K^\\top (Q x_k + b_Q)$ and $u$ uniform make (18) at the paper's "
    "$\\alpha = 1$ (the slider's default) **exactly** the head's softmax. How far is the attention's $\\alpha z$ "
    "from the true $\\lambda^*$? Sec. 8 measures it over every layer, head and token (Figure 4); here on your "
    f"sentence while you move $\\alpha$, and over {hv.CORPUS_SIZE} bundled sentences below.",
    try_this=hv.TRY_THIS, keys=hv.Keys,
)
ui.equation(r"\begin{aligned} \lambda^* = \arg\max_{\lambda}\ &\langle \lambda, \mu + z\rangle "
            r"- \frac{1}{2\alpha}\lVert\lambda\rVert^2 - \log \sum_i u_i e^{\langle t_i, \lambda\rangle}"
            r"\quad (9) \end{aligned}")
ui.equation(r"\text{deviation} = \frac{\lVert \lambda^* - \alpha z\rVert}{\lVert \lambda^*\rVert},\qquad "
            r"t_i = \frac{x_i}{\sqrt{d'}},\quad z = K^\top (Q x_k + b_Q),\quad u_i = \frac1n")

# ---- controls ---------------------------------------------------------------------------------------------------
lens = ui.choose_model(hv.Keys.MODEL, hv.Keys.MODEL_ZIP, device, families=hv.FAMILIES)
st.caption(f"Model: **{ui.plain(lens.info.label())}**.")
limit = hv.catalogue.token_limit(lens)
sentence = st.sidebar.text_input("Sentence", hv.DEFAULT_SENTENCE, max_chars=6000, key=hv.Keys.SENTENCE,
                                 bind="query-params",
                                 help=f"Any text up to {limit} tokens: the dual (9) is solved for each of its "
                                      "tokens as the query, in every layer and head.")
alpha_slot = st.sidebar.container()   # alpha is drawn here by ui.live below, which an alpha move reruns alone
#                                       (in presentation mode above its figure instead: ui.style.beside_figure)


@st.cache_resource(max_entries=16, show_spinner=False)
def sentence_forward(model, text, device_name, _lens):
    """The model's own forward of the sentence, kept for every alpha the slider visits."""
    return hv.sentence_forward(_lens, text)


def alpha_slider(where):
    return ui.log_slider("alpha (reliability of z in (4))", 1e-2, 1e1, hv.DEFAULT_ALPHA, key=hv.Keys.ALPHA, where=where,
                         help="The reliability alpha of the evidence z in problem (4); the paper uses 1. "
                              "Theorem 2: the smaller alpha, the better alpha z approximates lambda*.")


def solve(alpha):
    fwd = sentence_forward(lens.info.key, sentence, str(device), lens)
    return hv.sentence_duals(fwd, lens, alpha)


def draw(s: hv.SentenceDuals):
    ui.show_figure(figs.main_figure(s), key="heads")
    L, H = s.per_head.shape
    worst = int(s.per_head.argmax())
    st.caption(
        f"{len(s.tokens)} query tokens x {L} layers x {H} heads = {s.deviation.numel()} dual problems, each solved "
        f"by Newton to a gradient norm of at most {float(s.grad_norm.max()):.1e}. Mean deviation "
        f"{float(s.deviation.mean()):.4f}; the farthest head is layer {worst // H + 1}, head {worst % H + 1} "
        f"({float(s.per_head.max()):.4f}). The colour scale is fixed from 0, so the colours move with alpha.")
    ui.show_figure(figs.tokens_figure(s), key="tokens")
    first, others = float(s.per_token[:, 0].mean()), float(s.per_token[:, 1:].mean())
    st.caption(f"The queries of the first token ({ui.plain(s.tokens[0])}) deviate by {first:.4f} on average over "
               f"the layers, the other tokens by {others:.4f}.")
    corpus_section(s.alpha)   # at the released alpha: Streamlit sends a slider's value on release


# ---- Figure 4 over the corpus ------------------------------------------------------------------------------------

FIGURE4_KEYS = ("figure4", "per_head")   # the keys of corpus_figures's two figures, in order


def corpus_figures(dev) -> list:
    name = "MiniLM" if lens.info.key == hv.hub.BUNDLED_KEY else lens.info.name
    return [figs.deviation_histograms(dev.per_layer, dev.alpha, model=name), figs.deviation_per_head(dev.per_head)]


def corpus_section(alpha: float):
    """Figure 4 at the slider's alpha, solved in the background (thousands of dual problems, seconds to minutes)
    once per model and alpha for the whole server and kept on disk, so that the controls answer meanwhile."""
    st.subheader(f"Figure 4 of the Fenchel-dual paper: {hv.CORPUS_SIZE} sentences")
    job = (("dual/figure4", lens.info.key, alpha, str(device)),
           lambda progress: hv.deviation(alpha, str(device), progress, lens))
    try:
        dev, _ = ui.background(*job)
    except ValueError as err:
        st.error(ui.plain(err))
        return
    if dev is None:
        ui.wait_for(job[0], f"Solving the dual (9) for every layer, head and token of {hv.CORPUS_SIZE} sentences at "
                            f"alpha = {alpha:g} (once per model and alpha; the controls answer meanwhile)")
        return
    for fig, key in zip(corpus_figures(dev), FIGURE4_KEYS):
        ui.show_figure(fig, key=key)
    s = hv.figure4_summary(dev)
    L, H, _ = dev.per_head.shape
    st.caption(
        f"{s.n_tokens} query tokens x {L} layers x {H} heads = {s.n_problems} dual problems, each solved by Newton "
        f"to a gradient norm of at most {s.max_grad_norm:.1e}. Mean deviation {s.mean:.4f} (largest "
        f"{s.largest:.3f}); the queries of the first token ([CLS] or <s>) average {s.cls_mean:.4f}, the other "
        f"tokens {s.others_mean:.4f}. "
        + ("As in the paper's BERT and T5 panels, lambda* nearly coincides with alpha z: each head's softmax is "
           "close to the exact solution of problem (4)." if s.close else
           f"At this alpha, alpha z is a rough approximation of lambda*: Theorem 2 of {ui.cite('002')} needs "
           "alpha small."))


# ---- the page ----------------------------------------------------------------------------------------------------

ui.live(f"dual/sentence/{lens.info.key}", ui.style.beside_figure(alpha_slot), alpha_slider, solve, draw)
