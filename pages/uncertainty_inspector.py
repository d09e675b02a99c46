"""Page "Uncertainty inspector": a stochastic ViT (004) and its deterministic twin on one image and on the digits
test split."""
import hashlib
from collections import OrderedDict

import streamlit as st
import torch

from wviz import ui
from wviz.figures import uncertainty_inspector as figs
from wviz.vit import data
from wviz.views import uncertainty_inspector as views
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.evaluate import evaluate
from wviz.vit.metrics import SCORES

device = ui.page_setup(
    "Uncertainty inspector",
    "The stochastic Vision Transformer of the 004 paper embeds every image patch as a Gaussian "
    "$N(\\mu, \\Sigma)$ (eq. (5)) and lets patches attend by minus their squared 2-Wasserstein distance "
    "(Sec. 4.2). Sampling the embeddings gives a predictive distribution; the covariances say which patches the "
    "model is unsure of. Here a small demo model trained on scikit-learn's digits (bundled, nothing is downloaded) "
    "sits beside a deterministic ViT of the same size, or you upload your own checkpoint.",
)
ui.equation(r"\mu = W_\mu x + p_\mu,\quad \Sigma = \mathrm{ELU}(W_\Sigma x + p_\Sigma) + 1 \;\;(5),\qquad "
            r"A = \operatorname{softmax}\!\Big(-\tfrac{W_2^2(q, k)}{\sqrt{d_h}}\Big),\;\; "
            r"W_2^2 = \lVert \mu_q - \mu_k\rVert^2 + \lVert \Sigma_q^{1/2} - \Sigma_k^{1/2}\rVert^2")
sb = st.sidebar

# ------------------------------------------------------------------------------------------------- models


@st.cache_resource(max_entries=4, show_spinner="Loading the bundled checkpoint...")
def bundled(kind: str, where: str):
    return load_checkpoint(views.BUNDLED[kind], device=where)


@st.cache_resource(max_entries=2, show_spinner="Checking and loading the uploaded checkpoint...")
def uploaded(raw: bytes, name: str, where: str):
    return load_checkpoint(raw, name=name, device=where)


source = sb.radio("Checkpoint", ["bundled demo", "upload"], key="ckpt", bind="query-params", horizontal=True,
                  help="The bundled demo: a stochastic ViT and its deterministic twin trained on the digits. Or "
                       "upload a checkpoint written by `python -m wviz.vit.train` (.safetensors, or .pt/.pth read "
                       "with weights_only=True). The deterministic twin stays beside it for comparison.")
ckpt_file = sb.file_uploader("Checkpoint file (.safetensors, .pt, .pth)", key="ckpt_file",
                             help="Checked before use: size cap, header, config bounds, every weight's name and "
                                  "shape. Nothing in the file is executed.") if source == "upload" else None


def load_models():
    """name -> (model, record, cache key); the deterministic twin is always there. A record's entries were
    checked for type and bounds when its checkpoint was loaded (wviz.vit.checkpoint.check_record)."""
    twin = bundled("deterministic", str(device))
    if source == "upload":
        if ckpt_file is None:
            raise ValueError("upload a checkpoint in the sidebar (or choose the bundled demo)")
        raw = ckpt_file.getvalue()
        model, record = uploaded(raw, ckpt_file.name, str(device))
        key = "upload:" + hashlib.sha256(raw).hexdigest()
        first = (f"uploaded ({model.config.kind})", (model, record, key))
    else:
        first = ("stochastic", (*bundled("stochastic", str(device)), "bundled:stochastic"))
    return dict([first, ("deterministic", (*twin, "bundled:deterministic"))])


models = ui.guarded("vit/models", load_models)
if models is None:
    st.stop()
main_name = next(iter(models))
main_model, main_record, _ = models[main_name]
cfg = main_model.config
twin_cfg = models["deterministic"][0].config
digits_like = (cfg.channels, cfg.image_size, cfg.n_classes) == (twin_cfg.channels, twin_cfg.image_size,
                                                                 twin_cfg.n_classes)
if not digits_like:  # the twin takes 1 x 16 x 16 digits: it cannot read this model's images
    models = {main_name: models[main_name]}
names = main_record.get("class_names") or [str(i) for i in range(cfg.n_classes)]  # checked: one per class
with sb.expander("Training record", icon=":material/description:"):
    for n, (_, rec, key) in models.items():
        st.caption(n + ("" if key.startswith("bundled:") else ": as recorded in the file, not re-measured (the "
                                                              "dataset panel measures the model itself)"))
        st.json({k: rec[k] for k in ("data", "epochs", "seed", "lambda", "train_seconds", "metrics") if k in rec},
                 expanded=False)

# -------------------------------------------------------------------------------------------------- image


@st.cache_data(max_entries=1, show_spinner=False)
def test_split():
    return data.load_dataset("digits", "test")


image_source = sb.radio("Image", ["test set", "upload"], key="img_src", bind="query-params", horizontal=True,
                        help="A digit from the test split (never seen in training), or your own PNG/JPG.")
if image_source == "test set":
    index = sb.number_input("Test image", 0, 359, 0, 1, key="index", bind="query-params",
                            help="Index into the 360 test digits.")
    img_file, invert = None, "auto"
else:
    index = 0
    img_file = sb.file_uploader("Image (PNG/JPG)", type=["png", "jpg", "jpeg"], key="img_file",
                                help="Converted to grey, centre-cropped, resized to the model's input size.")
    invert = sb.radio("Invert", ["auto", "yes", "no"], key="invert", bind="query-params", horizontal=True,
                      help="The digits are light strokes on black; auto inverts a mostly light picture.")


def get_image():
    if image_source == "test set":
        if (cfg.channels, cfg.image_size) != (1, data.DIGIT_SIZE):
            raise ValueError(f"this model takes {cfg.channels} x {cfg.image_size} x {cfg.image_size} images; the "
                             "test set browser holds 1 x 16 x 16 digits: upload an image instead")
        x, y = test_split()
        return x[int(index)], int(y[index]), None
    if img_file is None:
        raise ValueError("upload a PNG or JPG in the sidebar (or pick a test image)")
    pre = views.preprocess(img_file.getvalue(), cfg.channels, cfg.image_size, invert)
    return pre.image, None, pre


picked = ui.guarded("vit/image", get_image)
if picked is None:
    st.stop()
image, label, pre = picked
if pre is not None:
    ui.show_figure(figs.preprocessing(pre.steps), key="vit_pre")
    st.caption("What the model sees: the last panel. A digit that is too thin, off-centre or framed differently "
               "from the training digits is out of distribution, and the uncertainty views below should say so.")

# ------------------------------------------------------------------------------------------------ one image

samples = sb.select_slider("Monte-Carlo samples S", [1, 2, 4, 8, 16, 32, 64, 128, 256], 32, key="samples",
                           bind="query-params", help="Draws of the patch embeddings from their Gaussians (eq. (5)); "
                                                      "the prediction is the mean of the S softmax outputs.")
seed = sb.number_input("Sampling seed", 0, 10_000, 0, key="seed", bind="query-params",
                       help="Seed of the Monte-Carlo draws, so that a link reproduces them.")
with st.spinner(f"Running {samples} Monte-Carlo draws through {len(models)} model(s)..."):
    runs = ui.guarded("vit/inspect", lambda: {n: views.inspect_image(m, image, int(samples), int(seed))
                                              for n, (m, _, _) in models.items()})
if runs is None:
    st.stop()

st.subheader("Prediction")
if label is not None:
    st.markdown(f"True class: **{names[label]}**. " + ", ".join(
        f"{n}: **{names[int(r.mc.mean[0].argmax())]}** ({float(r.mc.mean[0].max()):.1%})" for n, r in runs.items()))
ui.show_figure(figs.class_probabilities({n: r.mc for n, r in runs.items()}, names, int(samples)), key="vit_probs")
st.caption("Bars: the predictive distribution, the mean over S draws of softmax(logits). Whiskers: 5 % to 95 % of "
           "the draws, the per-class spread. The deterministic twin has no embedding noise: no whiskers.")
ui.equation(r"p(y\mid x) \approx \frac1S \sum_{s=1}^S \operatorname{softmax}\big(f(z^{(s)})\big),\;\; "
            r"z^{(s)} = \mu + \Sigma^{1/2}\varepsilon^{(s)},\qquad H(p) = -\sum_c p_c \log p_c")
ui.show_figure(figs.entropy_bars({n: float(r.mc.entropy[0]) for n, r in runs.items()}, cfg.n_classes),
               key="vit_entropy")
st.caption("Predictive entropy: 0 for a sure prediction, log C for a uniform one. Compare a clean test digit with "
           "an uploaded scribble.")

grid = cfg.grid
stochastic = main_model.config.kind == "stochastic"


@ui.fragment
def inside():
    """The layer, head and query controls and the maps they drive: moving one reruns this alone, not the page
    (the prediction above and the dataset panel below do not depend on them)."""
    st.subheader("Inside the stochastic model")
    c1, c2, c3 = st.columns(3)
    layer = c1.slider("Layer", 0, cfg.depth, min(1, cfg.depth), key="layer", bind="query-params",
                      help="0: the patch embeddings of eq. (5); l: the tokens after block l.")
    head = c2.selectbox("Head", list(range(cfg.heads)), key="head", bind="query-params",
                        help="Which attention head's map to show (the rollout averages the heads).")
    query = c3.selectbox("Query token", list(range(1 + cfg.n_patches)), key="query", bind="query-params",
                         format_func=lambda q: "class token" if q == 0 else
                         f"patch {q} (row {(q - 1) // grid}, col {(q - 1) % grid})",
                         help="The token whose attention weights are drawn.")
    mark = None if query == 0 else ((query - 1) // grid, (query - 1) % grid)
    run = runs[main_name]
    if stochastic:
        trace = views.patch_map(run.out, layer, grid)
        ui.show_figure(figs.map_over_image(image, trace, f"Per-patch uncertainty tr(Sigma) at layer {layer}",
                                           "tr(Sigma) per patch", mark), key="vit_trace")
        st.caption("The trace of each patch token's covariance. The embedding layer (0) depends on the patch alone; "
                   "later layers add the variance carried by attention, (A * A) Sigma_v.")
        ui.equation(r"\Sigma_i \leftarrow \Sigma_i + \Big(\sum_j A_{ij}^2\, \Sigma_{v,j}\Big)(W_o \odot W_o)^\top"
                    r"\quad\text{(variance of } \textstyle\sum_j A_{ij} v_j \text{ for independent } v_j)")
    else:
        st.info("The uploaded model is deterministic: it has no covariances to show.")
    blk = max(layer, 1) - 1
    maps = [views.query_attention(run.out, blk, h, int(query), grid)[0] for h in range(cfg.heads)]
    roll = views.rollout(run.out.attentions, grid)
    ui.show_figure(figs.attention_heads(maps, roll, f"{main_name}: attention of the query in block {blk + 1} per head, "
                                                    "and attention rollout"), key="vit_attention")
    st.caption("Weights of the query on the patches in each head of the block that produced the chosen layer (block 1 "
               "for layer 0). Rollout: the class token's share of every patch through all blocks, with the residual "
               "path, prod_l (A_l + I) / 2 averaged over heads (Abnar & Zuidema 2020).")
    one, cls_w = views.query_attention(run.out, blk, int(head), int(query), grid)
    ui.show_figure(figs.map_over_image(image, one, f"Attention of the query (red) in block {blk + 1}, head {head}",
                                       "weight on each patch", mark), key="vit_attention_head")
    st.caption(f"The same weights over the image; head {head} puts {cls_w:.1%} of the query's attention on the class "
               "token. W2 attention favours keys whose Gaussians are close in mean *and* in spread.")
    if "deterministic" in runs and main_name != "deterministic" and twin_cfg.grid != grid:
        st.info(f"The deterministic twin cuts the image into {twin_cfg.grid} x {twin_cfg.grid} patches, this model "
                f"into {grid} x {grid}: there is no same query to compare, so the twin's attention is not drawn.")
    elif "deterministic" in runs and main_name != "deterministic":
        twin_maps = [views.query_attention(runs["deterministic"].out, min(blk, twin_cfg.depth - 1), h, int(query),
                                           twin_cfg.grid)[0] for h in range(twin_cfg.heads)]
        twin_roll = views.rollout(runs["deterministic"].out.attentions, twin_cfg.grid)
        ui.show_figure(figs.attention_heads(twin_maps, twin_roll,
                                            "deterministic twin: dot-product attention of the same query"),
                       key="vit_attention_twin")
        st.caption("The same query under softmax(q k^T / sqrt(d_h)): compare where the two models look.")


inside()

# ---------------------------------------------------------------------------------------------- dataset


MAX_PANEL_SAMPLES = 64  # S x 360 test digits x 18 sets of images per model: the page's own budget


@st.cache_resource(max_entries=1)
def panel_reports() -> OrderedDict:
    """The last 4 dataset-panel reports by (model key, S, with corruptions). A plain store rather than
    st.cache_data because evaluate moves the progress bar, and a cached function would record that call and
    replay it on a bar that no longer exists."""
    return OrderedDict()


def dataset_panel(key: str, model, eval_samples: int, with_corruptions: bool, progress):
    store, k = panel_reports(), (key, eval_samples, with_corruptions)
    if k not in store:
        x, y = test_split()
        store[k] = evaluate(model, x, y, samples=eval_samples, corruptions=with_corruptions, progress=progress)
        while len(store) > 4:
            store.popitem(last=False)
    return store[k]


st.subheader("On the whole digits test split")
if not digits_like or (cfg.channels, cfg.image_size) != (1, data.DIGIT_SIZE):
    st.info("The dataset panel evaluates on the digits test split; this model takes other images.")
    st.stop()
d1, d2 = st.columns(2)
score = d1.selectbox("OOD score", [s for s in SCORES if stochastic or s != "covariance trace"], key="score",
                     bind="query-params", help="Larger = more likely out of distribution: 1 - max softmax, the "
                                               "predictive entropy, or the tokens' mean covariance trace.")
ood_name = d2.selectbox("OOD set", list(data.OOD_SETS), key="ood", bind="query-params",
                        help="Crops of scikit-learn's two sample photographs, or uniform noise, shaped like digits.")
bar = st.progress(0.0, text="Evaluating the models on the test split and the OOD sets...")
reports, recorded = {}, []
for i, (n, (m, rec, key)) in enumerate(models.items()):
    # the bundled checkpoints' corruption curves come from their training record (this same evaluation, run at the
    # end of training); an uploaded file's record is only a claim, so its model is measured here
    from_record = key.startswith("bundled:") and "corruption_error" in rec.get("metrics", {})
    if from_record:
        recorded.append(n)
    S = rec.get("eval_samples", 16)
    if S > MAX_PANEL_SAMPLES:
        st.caption(f"{n}: its record asks for {S} Monte-Carlo samples per image; the panel uses {MAX_PANEL_SAMPLES}.")
        S = MAX_PANEL_SAMPLES
    step = lambda f, t, i=i, n=n: bar.progress((i + f) / len(models), text=f"Evaluating {n}: {t}")  # noqa: E731
    reports[n] = ui.guarded(f"vit/panel/{n}", lambda: dataset_panel(key, m, S, not from_record, step))
bar.empty()
if any(r is None for r in reports.values()):
    st.stop()
ui.show_figure(figs.reliability({n: r.reliability for n, r in reports.items()}), key="vit_reliability")
st.caption("Each point: the test digits whose top probability fell in one of 15 bins; on the diagonal the "
           "model is as accurate as it is confident. ECE = sum over bins of (count / N) |accuracy - confidence|.")
ood_scores = {n: r.ood[ood_name][score] for n, r in reports.items() if score in r.ood[ood_name]}
ui.show_figure(figs.ood_histograms(ood_scores, score, ood_name), key="vit_ood")
st.caption("AUROC: the probability that a random OOD image scores higher than a random test digit (0.5 = "
           "chance). A covariance-trace AUROC below 0.5 means the OOD images get *smaller* covariances.")
curves = {n: ({k: torch.tensor(v) for k, v in models[n][1]["metrics"]["corruption_error"].items()}
              if n in recorded else r.corruption) for n, r in reports.items()}
ui.show_figure(figs.corruption_curves(curves, data.SEVERITIES), key="vit_corruption")
measured = [n for n in models if n not in recorded]
st.caption("Test error under Gaussian noise, blur and contrast loss at severities 1 to 5. "
           + (f"{', '.join(recorded)}: from the bundled checkpoint's training record (the same evaluation, run at "
              "the end of training). " if recorded else "")
           + (f"{', '.join(measured)}: measured here." if measured else ""))
