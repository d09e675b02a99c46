"""What the "Uncertainty inspector" page computes from its models and an image (no streamlit here).

One image goes through each model once on its means (for the per-layer covariances and attention maps, 004
Sec. 4.1-4.2) and S times with sampled embeddings (the Monte-Carlo predictive); the dataset panel evaluates each
model on its test split (MNIST's or the 8 x 8 digits', or a checkpoint's own data found through WVIZ_DATA or
uploaded as a .zip), the OOD sets and the corruptions (004's protocol at demo scale). The library holds the models
and their test splits (wviz.vit.demo), the panel's evaluation (wviz.vit.panel), one pass read per patch
(wviz.vit.inspection), the rollout (wviz.vit.rollout), the corrupted region (wviz.vit.patches) and the reading of
uploads (wviz.io).
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from io import BytesIO
from collections.abc import Callable

import torch

from wviz import disk_cache, io
from wviz.device import get_device
from wviz.guide import Try
from wviz.vit import data, shapes
from wviz.vit import evaluate as vit_evaluate  # noqa: F401 -- tests spy on vit_evaluate.evaluate through here
from wviz.vit.demo import (BUNDLED, DEFAULT_DEMO, DEMOS, VALID_CHECKPOINT, Loaded, ModelChoice, Models, TestSplit,  # noqa: F401
                           SHIPPED, bundled_pair, choose_models, data_place, disk_split, load_bundled,
                           load_upload, model_set, shipped_split, weights_digest,
                           zip_split)  # VALID_CHECKPOINT: for the tests
from wviz.vit.inspection import HeadMaps, Inspection, block_of, head_maps, inspect_image, patch_map, query_attention
from wviz.vit.calibration import TAU_RANGE, RiskCoverage, at_range_edge, perfect
from wviz.vit.maps import RULE_MEANING, TRACKS, occlusion_map, rule_traces, verdict  # noqa: F401
from wviz.vit.metrics import EPISTEMIC, FISHER, SCORES
from wviz.vit.model import RULES
from wviz.vit.panel import (CONFORMAL_SEVERITY, MAX_PANEL_SAMPLES, PANEL_VERSION, PanelJob,  # noqa: F401
                            calibrate_panel, corruption_aurocs, corruption_curves, evaluate_panel, ood_scores,
                            has_validation, map_aurocs, panel_jobs, seeds_said)
from wviz.vit.patches import REGION_KINDS, corrupt_region, patch_of, region_box

# What the page uses; tests and the benches also read other names here (BUNDLED, at_defaults, ...)
__all__ = ["load_bundled", "load_upload", "choose_models", "ModelChoice", "DEMO_LABELS", "DEFAULT_DEMO",
           "record_summary", "example_checkpoint",
           "data_place", "test_split_of", "zip_split", "example_test_zip", "class_names",
           "Picked", "test_image", "uploaded_image", "example_image", "REGION_KINDS", "region_box", "corrupt_region",
           "SAMPLES", "DEFAULT_SAMPLES", "inspect_all", "predictions", "entropies", "DEFAULT_LAYER", "token_label",
           "LayerMaps", "layer_maps", "score_choices", "PROTOTYPE_SCORES", "has_validation", "SEVERITIES",
           "panel_jobs", "evaluate_panel",
           "ood_scores", "corruption_curves", "corruption_aurocs", "OOD_HELP", "TRY_THIS", "map_aurocs",
           "at_layer", "RULE_MEANING", "verdict", "occlusion", "recorded_occlusion", "seeds_said", "calibrate_panel",
           "perfect_curve", "CONFORMAL_SEVERITY", "at_range_edge", "TAU_RANGE", "Keys", "Labels", "image_digest",
           "Shown", "Models"]

OOD_SETS = data.OOD_SETS
SEVERITIES = data.SEVERITIES
RECORD_SHOWN = ("data", "pretrain_epochs", "epochs", "seed", "lambda", "kl", "train_seconds", "metrics")
SAMPLES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the choices of S, the Monte-Carlo samples of one image
DEFAULT_SAMPLES = 32
DEFAULT_LAYER = 1      # the Layer slider starts at the tokens after block 1 (0 for a model of no block)
DEFAULT_DEPTH = 4      # the default pair's depth: the Layer slider runs from 0 to it at the page's defaults
DEMO_LABELS = {"MNIST": "mnist", "digits": "digits"}   # the demo choices (the URL holds the label) -> dataset


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    CKPT = "ckpt"
    DEMO = "demo"      # which bundled pair: its dataset's label (DEMO_LABELS)
    CKPT_FILE = "ckpt_file"
    TEST_ZIP = "test_zip"
    IMG_SRC = "img_src"
    INDEX = "index"
    IMG_FILE = "img_file"
    INVERT = "invert"
    REGION = "region"
    REGION_ROW = "region_row"
    REGION_COL = "region_col"
    REGION_SIZE = "region_size"
    REGION_STRENGTH = "region_strength"
    SAMPLES = "samples"
    SEED = "seed"
    LAYER = "layer"
    HEAD = "head"
    QUERY = "query"
    VIEW = "view"      # the attention views of one image
    SCORE = "score"
    OOD = "ood"
    PANEL = "panel"    # the dataset panel's views


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    OVER_IMAGE = "Over the image"
    HEADS = "Heads and rollout"
    TWIN = "Deterministic twin"
    OOD_SCORES = "OOD scores"
    CORRUPTIONS = "Corruptions"
    RELIABILITY = "Reliability"
    CONFUSION = "Confusion"
    TEMPERATURE = "Temperature scaling"
    RISK = "Risk-coverage"
    CONFORMAL = "Conformal sets"


def record_summary(record: dict) -> dict:
    """The entries of a training record the page lists (data, epochs, seed, the loss weights, seconds, metrics)."""
    return {k: record[k] for k in RECORD_SHOWN if k in record}


# ---- the test split and the image ------------------------------------------------------------------------------

def test_split_of(models: Models, place, upload: Callable[[], TestSplit] | None = None) -> TestSplit | None:
    """The main model's test split: its shipped dataset's, its own data found on disk (``place``,
    :func:`data_place`), or ``upload()`` (the page's cached :func:`zip_split` of an uploaded .zip); None while
    none is given."""
    if place.kind in SHIPPED:
        return shipped_split(place.kind)
    if place.root is not None:
        return disk_split(models.main, place)
    return None if upload is None else upload()


def class_names(models: Models, split: TestSplit | None) -> list[str]:
    """The names of the main model's classes: its test split's (an uploaded zip's folders when the model has none),
    else its record's, else 0, 1, ..."""
    return models.class_names if split is None else split.class_names


@functools.lru_cache(maxsize=1)
def example_test_zip() -> bytes:
    """A .zip the test-images uploader accepts for a model trained on `python -m wviz.vit.shapes`'s folder: that
    folder's test split, test/<circle|square|triangle>/*.png."""
    return shapes.test_zip()


@dataclass(frozen=True)
class Picked:
    """The image the page inspects: (C, H, W) in [0, 1], its true label (test set) or None, and for an upload its
    preprocessing steps."""

    image: torch.Tensor
    label: int | None
    pre: io.Preprocessed | None


def test_image(split: TestSplit, index: int) -> Picked:
    """Image ``index`` of the model's test split, with its label."""
    if not 0 <= int(index) < len(split.labels):
        raise ValueError(f"the test split holds {len(split.labels)} images: pick one from 0 to {len(split.labels) - 1}")
    return Picked(split.images[int(index)], int(split.labels[int(index)]), None)


def _dark_ground(models: Models, split: TestSplit | None) -> bool | None:
    """Whether the model's training images are mostly dark (True: a shipped dataset's handwritten digits), mostly
    light (False), or neither (None: photographs, which 'auto' never inverts), as its test split's mean brightness
    says."""
    if models.dataset:
        return True
    m = None if split is None else float(split.images.mean())
    return None if m is None or 0.4 <= m <= 0.6 else m < 0.4


def uploaded_image(raw: bytes | None, models: Models, invert: str = "auto", split: TestSplit | None = None) -> Picked:
    """An uploaded PNG/JPG as the main model's input (:func:`wviz.io.read_image`, which says what is wrong with a
    file that is not one); 'auto' inverts a picture whose brightness is unlike the model's test images', and only
    the input of a model of handwritten digits (a shipped dataset) is stretched to [0, 1] (its training digits'
    strokes reach 1; other images keep their colours)."""
    if raw is None:
        raise ValueError("upload a PNG or JPG in the sidebar (or pick a test image)")
    cfg = models.config
    pre = io.read_image(raw, cfg.channels, cfg.image_size, invert, _dark_ground(models, split),
                         models.dataset is not None)
    return Picked(pre.image, None, pre)


def image_digest(image: torch.Tensor) -> str:
    """A cache key of an image: its bytes' SHA-256 and its shape."""
    return hashlib.sha256(image.cpu().numpy().tobytes()).hexdigest() + str(tuple(image.shape))


@dataclass(frozen=True, eq=False)
class Shown:
    """What the page's one-image sections draw from: the models and their test split (None: none given), the
    image picked, that image as the models see it (its region ``box`` corrupted, None: no region) and its
    ``digest``, and the S draws' count and seed."""

    models: Models
    split: TestSplit | None
    picked: Picked
    image: torch.Tensor
    box: tuple[int, int, int, int] | None
    digest: str
    samples: int
    seed: int

    @property
    def drawn_from(self) -> tuple:
        """What the runs are a function of (a cache key): the models' weights, the image, S and the seed."""
        return tuple(m.weights_id for m in self.models.by_name.values()), self.digest, self.samples, self.seed


# ---- one image through the models ------------------------------------------------------------------------------

def inspect_all(models: Models, image: torch.Tensor, samples: int, seed: int) -> dict[str, Inspection]:
    """The image through every model shown, with the same S draws' seed."""
    return {name: inspect_image(m.model, image, int(samples), int(seed)) for name, m in models.by_name.items()}


def predictions(runs: dict[str, Inspection]) -> dict[str, tuple[int, float]]:
    """Per model, the class with the largest predictive probability p(y | x), and that probability."""
    return {name: (int(r.mc.mean[0].argmax()), float(r.mc.mean[0].max())) for name, r in runs.items()}


def entropies(runs: dict[str, Inspection]) -> dict[str, float]:
    """Predictive entropy H(p) of each model's mean prediction."""
    return {name: float(r.mc.entropy[0]) for name, r in runs.items()}


# ---- inside the model: layer, head and query -------------------------------------------------------------------

def token_label(query: int, grid: int) -> str:
    """'class token' or 'patch q (row r, col c)', counted from 1 as on the page (token q is patch q)."""
    rc = patch_of(query, grid)
    return "class token" if rc is None else f"patch {query} (row {rc[0] + 1}, col {rc[1] + 1})"


@dataclass(frozen=True)
class LayerMaps:
    """What the Layer slider (with the head and query beside it) shows of the main model: the image the models saw
    and its corrupted ``box`` of patches (None: none), tr(Sigma) per patch at ``layer`` under the model's own
    covariance ``rule`` and, ``post_hoc``, under the other rule applied to the same weights (rule -> map; both None
    for a deterministic model), the query's maps in every head of the block behind the layer, the chosen head's
    map and its weight on the class token, and the twin's maps of the same query (None when the twin is not shown
    or cuts the image into another grid, ``twin_grid``)."""

    image: torch.Tensor
    box: tuple[int, int, int, int] | None
    layer: int
    rule: str
    head: int
    query: int
    mark: tuple[int, int] | None
    trace: torch.Tensor | None
    heads: HeadMaps
    one: torch.Tensor
    class_weight: float
    twin: HeadMaps | None
    twin_grid: int | None
    post_hoc: dict[str, torch.Tensor] | None


def layer_maps(models: Models, runs: dict[str, Inspection], image: torch.Tensor,
               box: tuple[int, int, int, int] | None, layer: int, head: int, query: int) -> LayerMaps:
    """The maps of :class:`LayerMaps` from the runs of ``image`` (:func:`inspect_all`)."""
    grid, out = models.config.grid, runs[models.main.name].out
    block = block_of(layer)
    one, class_weight = query_attention(out, block, head, query, grid)
    twin, twin_grid = None, None
    tw = models.twin
    if tw.name in models.by_name and tw.name != models.main.name:
        t_cfg = tw.model.config
        if t_cfg.grid != grid:
            twin_grid = t_cfg.grid
        else:
            twin = head_maps(runs[tw.name].out, min(block, t_cfg.depth - 1), query, grid)
    rule = models.config.rule
    post_hoc = (rule_traces(models.main.model, image, layer, [r for r in RULES if r != rule])
                if models.stochastic else None)
    return LayerMaps(image, box, layer, rule, head, query, patch_of(query, grid), patch_map(out, layer, grid),
                     head_maps(out, block, query, grid), one, class_weight, twin, twin_grid, post_hoc)


def at_defaults(device: str | None = None) -> Callable[[int], LayerMaps]:
    """The page's layer maps at its default inputs (the default pair, DEFAULT_DEMO, the first test digit
    uncorrupted, DEFAULT_SAMPLES draws of seed 0, the first head, query 0: the class token) as a function of the layer,
    its main slider (0 to DEFAULT_DEPTH), on ``device`` (default WVIZ_DEVICE): bench_latency's reference draws it."""
    device = str(get_device()) if device is None else device
    models = bundled_pair(device)
    image = test_image(shipped_split(DEFAULT_DEMO), 0).image
    runs = inspect_all(models, image, DEFAULT_SAMPLES, 0)
    return lambda layer: layer_maps(models, runs, image, None, layer, 0, 0)


# ---- what the maps mean -----------------------------------------------------------------------------------------

# What the OOD sets of a test split are (TestSplit.ood_names), by its shipped dataset ('' for a model's own data)
_MIXED = "the left half of a test image beside the right half of one of another class"
OOD_HELP = {
    "digits": f"Far from the test digits: crops of scikit-learn's two sample photographs, or uniform noise. Near: "
              f"{_MIXED} (mixed digits); letters drawn at the digits' size and stroke, a set built to report on and "
              f"never used to choose a recipe (docs/TRAINING.md). All 16 x 16 like the digits.",
    "mnist": f"In the shape of OpenOOD's MNIST benchmark, all from files inside installed packages. Near: the letters "
             f"A-J in 23 of matplotlib's typefaces (notMNIST's recipe), and {_MIXED} (mixed digits). Far: crops of "
             f"scikit-image's brick, grass and gravel textures, of photographs (in grey), and uniform noise. All "
             f"28 x 28 like MNIST.",
    "": f"Far from the test images: crops of scikit-learn's two sample photographs, or uniform noise. Near: {_MIXED} "
        f"(mixed test images). All shaped like the test images.",
}


def at_layer(aurocs: dict, rule: str, layer: int) -> dict[str, float]:
    """{OOD set: AUROC} of one rule's map at one layer, from :func:`map_aurocs`."""
    return {name: float(a[layer]) for name, a in aurocs.get(rule, {}).items()}


OCCLUSION_VERSION = 1


def occlusion(models: Models, image: torch.Tensor, samples: int, seed: int,
              share: bool = False) -> tuple[torch.Tensor, float] | None:
    """(dMI per patch, the image's score: the mean MI of its occluded copies) of the main model at the page's S
    draws and seed (None for a deterministic model).

    P + 1 passes of S draws: 0.3 s on the digits, 3 s on MNIST's 49 patches. A shipped result (wviz.precompute:
    each bundled pair's first test image at the page's defaults) is read from assets/cache; another is computed,
    and kept in the shared disk cache only with ``share`` (wviz.precompute): a file per image a student looks at
    would push the panels' results out of it."""
    if not models.stochastic:
        return None
    model = models.main.model
    params = {"weights": weights_digest(model), "image": image_digest(image), "samples": int(samples),
              "seed": int(seed), "device": str(next(model.parameters()).device)}

    def compute() -> tuple[torch.Tensor, float]:
        change, _, score = occlusion_map(model, image, int(samples), int(seed))
        return change, score

    if share or disk_cache.precomputed("vit_occlusion", params, OCCLUSION_VERSION):
        return disk_cache.cached("vit_occlusion", params, OCCLUSION_VERSION, compute)
    return compute()


def recorded_occlusion(models: Models) -> dict | None:
    """{OOD set: AUROC} of the MI-occlusion score in the bundled model's record (mean over its Monte-Carlo seeds),
    or None (an upload: the calibration panel measures it)."""
    rec = models.main.record.get("metrics", {}).get("occlusion_auroc") if models.main.bundled else None
    return None if not rec else {k: sum(v) / len(v) for k, v in rec.items()}


# ---- the dataset panel -----------------------------------------------------------------------------------------

# The scores of layer 0's prototypes: the page shows their formula beside the histograms
PROTOTYPE_SCORES = ("prototype distance", FISHER)


def score_choices(config, validation: bool = False) -> list[str]:
    """The OOD scores a model of ``config`` (wviz.vit.model.ViTConfig) has: those of the Monte-Carlo draws and the
    covariances for the stochastic model only, the prototype distance where its layer 0 has prototypes, and the
    Fisher combination where it also has a ``validation`` split (wviz.vit.panel.has_validation) to rank against."""
    prototypes = {"prototype distance": config.has_prototypes, FISHER: config.has_prototypes and validation}
    return [s for s in SCORES if (config.kind == "stochastic" or s not in EPISTEMIC) and prototypes.get(s, True)]


def perfect_curve(risk: dict[str, RiskCoverage]) -> RiskCoverage:
    """The risk-coverage curve of a perfect score for one model (``risk``: score -> curve): every score of a model
    ranks the same predictions, so any of its curves gives their errors."""
    return perfect(next(iter(risk.values())))


# ---- example uploads -------------------------------------------------------------------------------------------

EXAMPLE_INDEX = 0  # a 6 of the 8 x 8 digits' test split, which both digits models classify correctly


def example_checkpoint() -> tuple[bytes, str]:
    """The default pair's stochastic checkpoint, as the bytes and name of a file the checkpoint uploader accepts."""
    path = BUNDLED[DEFAULT_DEMO]["stochastic"]
    return path.read_bytes(), path.name


def example_image(side: int = 64) -> bytes:
    """A PNG the image uploader accepts: test digit EXAMPLE_INDEX of the 8 x 8 digits (a 6), enlarged to side x side
    and drawn dark on white like ink on paper ('auto' inverts it back to the digits' light strokes on black)."""
    from PIL import Image

    big = data.resize(shipped_split("digits").images[EXAMPLE_INDEX][None], side)[0, 0]
    buf = BytesIO()
    Image.fromarray(((1 - big) * 255).round().to(torch.uint8).numpy()).save(buf, "PNG")
    return buf.getvalue()


# ---- guided experiments ----------------------------------------------------------------------------------------

# Values as the URL holds them: layer an int of the slider 0..depth (3 for the bundled models), index an int of the
# test split, score and ood options of their selectboxes, panel a view of the dataset panel. Numbers in the
# sentences are those of the bundled models.
TRY_THIS = (
    Try("An 8 the twin is sure is a 5", {Keys.INDEX: 715},
        "The line above the bars reads it: the twin calls this 8 a 5 at 98.5%; the stochastic model says 8 at "
        "84.5%."),
    Try("Textures, scored by the embedding covariance",
        {Keys.SCORE: "embedding covariance", Keys.OOD: "textures", Keys.PANEL: Labels.OOD_SCORES},
        "AUROC 1.000 in the panel's title: virtually every texture crop gets larger layer-0 variances than the test "
        "digits, its patches being far from the prototypes of the training patches, before any attention."),
    Try("Letters, by the Fisher combination",   # the letters are MNIST's first OOD set: no `ood` (a default)
        {Keys.SCORE: FISHER, Keys.PANEL: Labels.OOD_SCORES},
        "AUROC 0.919 in the panel's title, above both its parts (the predictive entropy 0.882, the prototype "
        "distance 0.805) and the twin's best (0.874): each ranked among the validation digits' and combined, a "
        "letter unusual by either stands out."),
    Try("8 x 8 digits: noise on the middle of the digit", {Keys.DEMO: "digits", Keys.REGION: "noise",
                                                           Keys.REGION_ROW: 2, Keys.REGION_COL: 2, Keys.REGION_SIZE: 2,
                                                           Keys.LAYER: 0},
        "The four noisy patches (the dashed box) are far from every patch the prototypes learned: on the tr(Sigma) "
        "map they are the brightest, above every clean patch; the 6 stays a 6, but at 54.0% (the line above the "
        "bars), and its whisker (5-95 % of the draws) spans most of the axis."),
    Try("8 x 8 digits: mixed digits, scored by the covariance trace",
        {Keys.DEMO: "digits", Keys.SCORE: "covariance trace", Keys.OOD: "mixed digits", Keys.PANEL: Labels.OOD_SCORES},
        "AUROC 0.519 in the panel's title, chance: halves of two digits are made of digit patches, each close to a "
        "prototype; only how they fit together is new, and the trace does not see it. The MI-occlusion score does "
        "(its caption under the panel: mixed digits 0.87)."),
)
