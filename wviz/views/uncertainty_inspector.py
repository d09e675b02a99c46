"""What the "Uncertainty inspector" page computes from its models and an image (no streamlit here).

One image goes through each model once on its means (for the per-layer covariances and attention maps, 004
Sec. 4.1-4.2) and S times with sampled embeddings (the Monte-Carlo predictive, :func:`wviz.vit.model.mc_predict`).
The dataset panel evaluates each model on the digits test split, the OOD sets and the corruptions (004's protocol
at demo scale, :func:`wviz.vit.evaluate.evaluate`).
"""
from __future__ import annotations

import functools
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from wviz import disk_cache
from wviz.guide import Try
from wviz.vit import data, metrics
from wviz.vit import evaluate as vit_evaluate  # looked up at call time: tests spy on evaluate
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.metrics import EPISTEMIC, SCORES
from wviz.vit.model import MCPrediction, ViTOutput, mc_predict

__all__ = ["ASSETS", "BUNDLED", "OOD_SETS", "SEVERITIES", "MAX_PANEL_SAMPLES", "Loaded", "load_bundled",
           "load_upload", "Models", "model_set", "record_summary", "test_split", "Picked", "test_image",
           "uploaded_image", "Preprocessed", "preprocess", "Inspection", "inspect_image", "inspect_all", "predictions",
           "entropies", "patch_map", "query_attention", "rollout", "token_label", "patch_of", "block_of",
           "HeadMaps", "head_maps", "Inside", "inside", "score_choices", "PanelJob", "panel_jobs", "evaluate_panel",
           "weights_digest", "ood_scores", "corruption_curves", "VALID_CHECKPOINT", "ModelChoice", "choose_models",
           "EXAMPLE_INDEX", "example_checkpoint", "example_image", "TRY_THIS"]

ASSETS = Path(__file__).resolve().parents[2] / "assets"
BUNDLED = {"stochastic": ASSETS / "vit_digits_stochastic.safetensors",
           "deterministic": ASSETS / "vit_digits_deterministic.safetensors"}
OOD_SETS = data.OOD_SETS
SEVERITIES = data.SEVERITIES
MAX_PANEL_SAMPLES = 64  # S x 360 test digits x 18 sets of images per model: the dataset panel's budget
RECORD_SHOWN = ("data", "pretrain_epochs", "epochs", "seed", "lambda", "kl", "train_seconds", "metrics")


# ---- models ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Loaded:
    """One model on the page: its name on the page, the model, its training record (entries checked for type
    and bounds when loaded, wviz.vit.checkpoint.check_record) and a key naming its weights ('bundled:<kind>' or
    'upload:<sha256 of the file>')."""

    name: str
    model: torch.nn.Module
    record: dict
    key: str

    @property
    def bundled(self) -> bool:
        return self.key.startswith("bundled:")


def load_bundled(kind: str, device: str) -> Loaded:
    """The bundled demo model of ``kind`` ('stochastic' or 'deterministic') on ``device``."""
    model, record = load_checkpoint(BUNDLED[kind], device=device)
    return Loaded(kind, model, record, f"bundled:{kind}")


def load_upload(raw: bytes | None, file_name: str, device: str) -> Loaded:
    """An uploaded checkpoint (checked before use, see wviz.vit.checkpoint), named 'uploaded (<kind>)'."""
    if raw is None:
        raise ValueError("upload a checkpoint in the sidebar (or choose the bundled demo)")
    model, record = load_checkpoint(raw, name=file_name, device=device)
    return Loaded(f"uploaded ({model.config.kind})", model, record, "upload:" + hashlib.sha256(raw).hexdigest())


@dataclass(frozen=True)
class Models:
    """The models the page shows, by name: the main one first, then the deterministic twin when it reads the same
    images (channels, size and classes). ``twin`` is the bundled twin, shown or not."""

    by_name: dict[str, Loaded]
    twin: Loaded

    @property
    def main(self) -> Loaded:
        return next(iter(self.by_name.values()))

    @property
    def config(self):
        return self.main.model.config

    @property
    def stochastic(self) -> bool:
        return self.config.kind == "stochastic"

    @property
    def class_names(self) -> list[str]:
        """The main model's class names (checked: one per class), or 0, 1, ..."""
        return self.main.record.get("class_names") or [str(i) for i in range(self.config.n_classes)]

    @property
    def reads_digits(self) -> bool:
        """Whether the dataset panel (the digits test split, 1 x 16 x 16) applies to every model shown."""
        return self.twin.name in self.by_name and (self.config.channels, self.config.image_size) == (1, data.DIGIT_SIZE)


def model_set(main: Loaded, twin: Loaded) -> Models:
    """The main model and the deterministic twin, the twin left out when it cannot read the main model's images."""
    a, b = main.model.config, twin.model.config
    same = (a.channels, a.image_size, a.n_classes) == (b.channels, b.image_size, b.n_classes)
    return Models({main.name: main, **({twin.name: twin} if same else {})}, twin)


VALID_CHECKPOINT = (
    "A valid checkpoint is a .safetensors file written by `python -m wviz.vit.train` (or "
    "`wviz.vit.checkpoint.save_checkpoint`), or a .pt/.pth file holding only a dict of 'config', 'state_dict' and "
    "'record' (plain values and tensors, read with weights_only=True). Its config describes a ViT (image size, "
    "patch size, channels, classes, width, depth, heads) and its weights are exactly that ViT's, by name and shape, "
    "finite floats. The example checkpoint under the uploader is one.")


@dataclass(frozen=True)
class ModelChoice:
    """The models the page shows, and why an upload was not used (None when it was, or none was asked for);
    ``waiting`` when the upload option is chosen but no file is uploaded yet."""

    models: Models
    refused: str | None
    waiting: bool


def choose_models(source: str, file_name: str, upload: Callable[[], Loaded],
                  bundled: Callable[[str], Loaded]) -> ModelChoice:
    """The uploaded checkpoint beside the deterministic twin when ``source`` is 'upload' and the file passes every
    check; otherwise the bundled demo, with what was wrong with the file (its name, the problem, what a valid
    checkpoint is) so that the page keeps working while the user fixes it. ``upload()`` and ``bundled(kind)`` are
    the page's cached loaders (:func:`load_upload`, :func:`load_bundled`)."""
    twin = bundled("deterministic")
    demo = lambda: model_set(bundled("stochastic"), twin)  # noqa: E731
    if source != "upload":
        return ModelChoice(demo(), None, False)
    if not file_name:
        return ModelChoice(demo(), None, True)
    try:
        return ModelChoice(model_set(upload(), twin), None, False)
    except ValueError as err:
        problem = str(err).rstrip(".")
        return ModelChoice(demo(), f"Your checkpoint '{file_name}' was not used: {problem}.\n\n{VALID_CHECKPOINT}",
                           False)


def record_summary(record: dict) -> dict:
    """The entries of a training record the page lists (data, epochs, seed, the loss weights, seconds, metrics)."""
    return {k: record[k] for k in RECORD_SHOWN if k in record}


# ---- the image -------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def test_split() -> tuple[torch.Tensor, torch.Tensor]:
    """The 360 digits of the test split (never seen in training): images (360, 1, 16, 16), labels (360,)."""
    return data.load_dataset("digits", "test")


@dataclass(frozen=True)
class Picked:
    """The image the page inspects: (C, H, W) in [0, 1], its true label (test set) or None, and for an upload its
    preprocessing steps."""

    image: torch.Tensor
    label: int | None
    pre: Preprocessed | None


def test_image(config, index: int) -> Picked:
    """Digit ``index`` of the test split, for a model that takes 1 x 16 x 16 images."""
    if (config.channels, config.image_size) != (1, data.DIGIT_SIZE):
        raise ValueError(f"this model takes {config.channels} x {config.image_size} x {config.image_size} images; "
                         "the test set browser holds 1 x 16 x 16 digits: upload an image instead")
    x, y = test_split()
    return Picked(x[int(index)], int(y[int(index)]), None)


def uploaded_image(raw: bytes | None, config, invert: str = "auto") -> Picked:
    """An uploaded PNG/JPG as the model's input (see :func:`preprocess`); a file that is not one says what is wrong
    and what a valid image is."""
    if raw is None:
        raise ValueError("upload a PNG or JPG in the sidebar (or pick a test image)")
    try:
        pre = preprocess(raw, config.channels, config.image_size, invert)
    except ValueError as err:
        size = config.image_size
        raise ValueError(f"your image was not used: {str(err).rstrip('.')}. A valid image is a PNG or JPG picture "
                         f"of one digit, light on dark or dark on light, of any size (it is turned grey, "
                         f"centre-cropped to a square and resized to {size} x {size}); the example image under the "
                         "uploader is one.") from None
    return Picked(pre.image, None, pre)


# ---- a corrupted region ----------------------------------------------------------------------------------------

REGION_KINDS = ("none", "occlude", "noise")


def region_box(row: int, col: int, size: int, grid: int) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) patch rows and columns, bottom and right excluded, of a size x size square of
    patches whose top-left patch is (row, col); clamped to the grid (a square past the edge is cut there)."""
    top, left = min(max(int(row), 0), grid - 1), min(max(int(col), 0), grid - 1)
    size = max(int(size), 1)
    return top, left, min(top + size, grid), min(left + size, grid)


def corrupt_region(image: torch.Tensor, kind: str, box: tuple[int, int, int, int], patch: int,
                   strength: float = 0.5, seed: int = 0) -> torch.Tensor:
    """The (C, H, W) image with the patches of ``box`` (see :func:`region_box`, ``patch`` pixels a side) occluded
    (set to 0, the digits' background) or with seeded Gaussian noise of standard deviation ``strength`` added
    (clipped to [0, 1]); every other pixel as it was. "none" returns the image itself."""
    if kind not in REGION_KINDS:
        raise ValueError(f"unknown region corruption {kind!r}: choose one of {', '.join(REGION_KINDS)}")
    if kind == "none":
        return image
    top, left, bottom, right = (patch * b for b in box)
    out = image.clone()
    cut = out[:, top:bottom, left:right]
    if kind == "occlude":
        cut.zero_()
    else:
        g = torch.Generator().manual_seed(int(seed))
        noise = torch.randn(cut.shape, generator=g, dtype=cut.dtype)
        cut.copy_((cut + float(strength) * noise.to(cut.device)).clamp(0, 1))
    return out


@dataclass(frozen=True)
class Preprocessed:
    """An uploaded picture on its way to the model: steps = [(caption, (C, H, W) image in [0, 1])], the last one
    being the model's input; inverted says whether dark-on-light was turned into light-on-dark like the digits."""

    steps: list
    image: torch.Tensor
    inverted: bool


def preprocess(raw: bytes, channels: int, size: int, invert: str = "auto") -> Preprocessed:
    """A PNG/JPG upload -> the model's input: grey (or RGB), centre-cropped to a square, resized to size x size,
    inverted when ``invert`` is 'yes', or 'auto' and the picture is mostly light (the digits are light strokes
    on black), then stretched to [0, 1] like the training digits (whose strokes reach 1)."""
    if invert not in ("auto", "yes", "no"):
        raise ValueError(f"invert must be 'auto', 'yes' or 'no', got {invert!r}")
    full = data.image_from_bytes(raw, channels, 128)
    small = data.resize(full[None], size)[0]
    inverted = invert == "yes" or (invert == "auto" and float(small.mean()) > 0.5)
    x = 1 - small if inverted else small
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1e-6:
        raise ValueError("the picture is a single flat colour: there is nothing for the model to read")
    x = (x - lo) / (hi - lo)
    steps = [("upload, grey, square", full), (f"{size} x {size}", small)]
    if inverted:
        steps.append(("inverted", 1 - small))
    steps.append(("[0, 1]: model input", x))
    return Preprocessed(steps, x, inverted)


# ---- one image through the models ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Inspection:
    """One image through one model: ``out`` the forward pass on the means (batch of 1), ``mc`` the Monte-Carlo
    predictive over ``samples`` draws."""

    out: ViTOutput
    mc: MCPrediction
    samples: int


@torch.no_grad()
def inspect_image(model, image: torch.Tensor, samples: int = 32, seed: int = 0) -> Inspection:
    """Run one (C, H, W) image through ``model`` (on the model's device). ValueError when the model's output
    overflows (inf or NaN) rather than showing NaN."""
    device = next(model.parameters()).device
    x = image.to(device, torch.float32)[None]
    out, mc = model(x), mc_predict(model, x, samples=samples, seed=seed)
    if not (bool(torch.isfinite(out.logits).all()) and bool(torch.isfinite(mc.mean).all())):
        raise ValueError("the model's output on this image is not a finite number (inf or NaN): its weights push "
                         "the computation beyond float range")
    return Inspection(out, mc, samples)


def inspect_all(models: Models, image: torch.Tensor, samples: int, seed: int) -> dict[str, Inspection]:
    """The image through every model shown, with the same S draws' seed."""
    return {name: inspect_image(m.model, image, int(samples), int(seed)) for name, m in models.by_name.items()}


def predictions(runs: dict[str, Inspection]) -> dict[str, tuple[int, float]]:
    """Per model, the class with the largest predictive probability p(y | x), and that probability."""
    return {name: (int(r.mc.mean[0].argmax()), float(r.mc.mean[0].max())) for name, r in runs.items()}


def entropies(runs: dict[str, Inspection]) -> dict[str, float]:
    """Predictive entropy H(p) of each model's mean prediction."""
    return {name: float(r.mc.entropy[0]) for name, r in runs.items()}


def _grid(values: torch.Tensor, grid: int) -> torch.Tensor:
    return values.reshape(grid, grid)


def patch_map(out: ViTOutput, layer: int, grid: int) -> torch.Tensor:
    """tr(Sigma) of every patch token at ``layer`` (0 = the embeddings of eq. (5)) as a (grid, grid) map (image 0).
    None for a deterministic model."""
    if out.covariances is None:
        return None
    if not 0 <= layer < len(out.covariances):
        raise ValueError(f"layer must be 0 to {len(out.covariances) - 1}, got {layer}")
    return _grid(out.covariances[layer][0, 1:].sum(-1), grid)


def query_attention(out: ViTOutput, layer: int, head: int, query: int, grid: int) -> tuple[torch.Tensor, float]:
    """The attention of token ``query`` (0 = class token, 1.. = patches row by row) in block ``layer`` and head
    ``head``: its weights on the patches as a (grid, grid) map, and its weight on the class token."""
    A = out.attentions[layer][0, head, query]
    return _grid(A[1:], grid), float(A[0])


def rollout(attentions: tuple[torch.Tensor, ...], grid: int) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): average the heads, add the residual path, A' = (A + I) / 2,
    multiply the layers R = A'_L ... A'_1; the class token's row of R over the patches as a (grid, grid) map
    (image 0). Rows of A' sum to one, so the map plus the class token's own share sums to one."""
    n = attentions[0].shape[-1]
    eye = torch.eye(n, device=attentions[0].device, dtype=attentions[0].dtype)
    R = eye
    for A in attentions:
        R = ((A[0].mean(0) + eye) / 2) @ R
    return _grid(R[0, 1:], grid)


# ---- inside the model: layer, head and query ---------------------------------------------------------------

def patch_of(query: int, grid: int) -> tuple[int, int] | None:
    """(row, col) of the patch of token ``query`` (1.. row by row), None for the class token (0)."""
    return None if query == 0 else ((query - 1) // grid, (query - 1) % grid)


def token_label(query: int, grid: int) -> str:
    """'class token' or 'patch q (row r, col c)'."""
    rc = patch_of(query, grid)
    return "class token" if rc is None else f"patch {query} (row {rc[0]}, col {rc[1]})"


def block_of(layer: int) -> int:
    """The block (0-based) whose attention produced the tokens of ``layer`` (block 0 for the embeddings, 0)."""
    return max(layer, 1) - 1


@dataclass(frozen=True)
class HeadMaps:
    """A query's weights on the patches in one block, a (grid, grid) map per head, and the class token's rollout."""

    block: int
    per_head: tuple[torch.Tensor, ...]
    rollout: torch.Tensor


def head_maps(out: ViTOutput, block: int, query: int, grid: int) -> HeadMaps:
    heads = out.attentions[block].shape[1]
    return HeadMaps(block, tuple(query_attention(out, block, h, query, grid)[0] for h in range(heads)),
                    rollout(out.attentions, grid))


@dataclass(frozen=True)
class Inside:
    """What the layer, head and query controls show of the main model: tr(Sigma) per patch at ``layer`` (None for
    a deterministic model), the query's maps in ``block``, the chosen head's map and its weight on the class token,
    and the twin's maps of the same query (None when the twin is not shown or cuts the image into another grid,
    ``twin_grid``)."""

    layer: int
    head: int
    query: int
    mark: tuple[int, int] | None
    trace: torch.Tensor | None
    heads: HeadMaps
    one: torch.Tensor
    class_weight: float
    twin: HeadMaps | None
    twin_grid: int | None


def inside(models: Models, runs: dict[str, Inspection], layer: int, head: int, query: int) -> Inside:
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
    return Inside(layer, head, query, patch_of(query, grid), patch_map(out, layer, grid) if models.stochastic else None,
                  head_maps(out, block, query, grid), one, class_weight, twin, twin_grid)


# ---- the dataset panel -----------------------------------------------------------------------------------------

def score_choices(stochastic: bool) -> list[str]:
    """The OOD scores a model has: those of the Monte-Carlo draws and the covariances for the stochastic model
    only."""
    return [s for s in SCORES if stochastic or s not in EPISTEMIC]


@dataclass(frozen=True)
class PanelJob:
    """One model's evaluation for the panel: S Monte-Carlo samples per image (``asked`` by its record, capped at
    MAX_PANEL_SAMPLES), and whether its corruption curves are measured here or read from its record (a bundled
    checkpoint's record holds this same evaluation, run at the end of training; an upload's is only a claim)."""

    loaded: Loaded
    samples: int
    asked: int
    from_record: bool

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def capped(self) -> bool:
        return self.asked > self.samples

    @property
    def key(self) -> tuple:
        """What the evaluation depends on: the weights, S and whether the corruptions are run."""
        return self.loaded.key, self.samples, not self.from_record


def panel_jobs(models: Models) -> tuple[PanelJob, ...]:
    jobs = []
    for m in models.by_name.values():
        asked = m.record.get("eval_samples", 16)
        from_record = m.bundled and "corruption_error" in m.record.get("metrics", {})
        jobs.append(PanelJob(m, min(asked, MAX_PANEL_SAMPLES), asked, from_record))
    return tuple(jobs)


# The panel's version in the shared disk cache: raise it when evaluate's numbers change.
PANEL_VERSION = 2


def evaluate_panel(job: PanelJob, progress=None) -> vit_evaluate.Report:
    """The model's report on the test split and the OOD sets (and the corruptions unless read from its record);
    ``progress(done, total)`` as the passes over the sets of images start.

    Seconds per pass: computed once per (weights, S, corruptions, device) for every server process
    (wviz.disk_cache); a report loaded from there reports no progress."""
    x, y = test_split()
    step = None if progress is None else (lambda fraction, text: progress(fraction, 1.0))
    model = job.loaded.model
    params = {"weights": weights_digest(model), "samples": job.samples, "corruptions": not job.from_record,
              "device": str(next(model.parameters()).device)}
    return disk_cache.cached("vit_panel", params, PANEL_VERSION,
                             lambda: vit_evaluate.evaluate(model, x, y, samples=job.samples,
                                                           corruptions=not job.from_record, progress=step),
                             types=(vit_evaluate.Report, metrics.Reliability))


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of the model's configuration and every tensor of its state: what its evaluation depends on, whatever
    file (or test) it came from."""
    h = hashlib.sha256(repr(model.config).encode())
    for name, t in model.state_dict().items():
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def ood_scores(reports: dict[str, vit_evaluate.Report], ood_name: str, score: str) -> dict:
    """model name -> (test-digit scores, OOD scores, AUROC) of one score on one OOD set, for the models that have
    that score."""
    return {n: r.ood[ood_name][score] for n, r in reports.items() if score in r.ood[ood_name]}


def corruption_curves(jobs: tuple[PanelJob, ...], reports: dict[str, vit_evaluate.Report]) -> dict:
    """model name -> {corruption: (5,) test error at severities 1..5}: from the record or measured here."""
    return {j.name: ({k: torch.tensor(v) for k, v in j.loaded.record["metrics"]["corruption_error"].items()}
                     if j.from_record else reports[j.name].corruption) for j in jobs}


def corruption_aurocs(jobs: tuple[PanelJob, ...], reports: dict[str, vit_evaluate.Report], score: str) -> dict:
    """model name -> {corruption: (5,) AUROC of ``score`` for corrupted against clean test digits}, from the record
    or measured here, for the models that have the score; a record without these AUROCs (a checkpoint from before
    they were measured) gives None."""
    out = {}
    for j in jobs:
        if j.from_record:
            recorded = j.loaded.record["metrics"].get("corruption_auroc")
            if recorded is None:
                out[j.name] = None
            elif all(score in per for per in recorded.values()):
                out[j.name] = {k: torch.tensor(per[score]) for k, per in recorded.items()}
        elif all(score in per for per in reports[j.name].corruption_auroc.values()):
            out[j.name] = {k: per[score] for k, per in reports[j.name].corruption_auroc.items()}
    return out


# ---- example uploads -------------------------------------------------------------------------------------------

EXAMPLE_INDEX = 0  # a 6 of the test split, which both bundled models classify correctly


def example_checkpoint() -> bytes:
    """The bundled stochastic demo checkpoint, as the bytes of a file the checkpoint uploader accepts."""
    return BUNDLED["stochastic"].read_bytes()


def example_image(side: int = 64) -> bytes:
    """A PNG the image uploader accepts: test digit EXAMPLE_INDEX (a 6), enlarged to side x side and drawn dark on
    white like ink on paper ('auto' inverts it back to the digits' light strokes on black)."""
    from PIL import Image

    x, _ = test_split()
    big = data.resize(x[EXAMPLE_INDEX][None], side)[0, 0]
    buf = io.BytesIO()
    Image.fromarray(((1 - big) * 255).round().to(torch.uint8).numpy()).save(buf, "PNG")
    return buf.getvalue()


# ---- guided experiments ----------------------------------------------------------------------------------------

# Values as the URL holds them: layer an int of the slider 0..depth (3 for the bundled models), index an int of the
# test split, score and ood options of their selectboxes. Numbers in the sentences are those of the bundled models.
TRY_THIS = (
    Try("The last layer against the first", {"layer": 3},
        "tr(Sigma) per patch grows from about 0.5 at the embeddings (layer 0) to about 8 at layer 3: every block "
        "adds the variance that attention carries, (A * A) Sigma_v."),
    Try("A digit the deterministic twin gets wrong", {"index": 265},
        "The twin is 99 % sure this 8 is a 9; the stochastic model says 8 at 70 %, and its predictive entropy is "
        "more than ten times the twin's."),
    Try("Occlude the middle of the digit", {"region": "occlude", "region_row": 1, "region_col": 1,
                                            "region_size": 2, "layer": 0},
        "The four blanked patches take the background's larger tr(Sigma) (0.16-0.59 become 0.66-0.80), the 6 turns "
        "into a 3 at 56 %, and the top class's whisker (5-95 % of the draws) widens from 0.985-0.997 to 0.14-0.90."),
    Try("Noise images, scored by the covariance trace", {"score": "covariance trace", "ood": "uniform noise"},
        "AUROC about 0.26, below chance: noise gets smaller covariances than the digits, while 1 - max softmax "
        "tells them apart (AUROC about 0.95)."),
    Try("Mixed digits, scored by the mutual information", {"score": "mutual information", "ood": "mixed digits"},
        "Halves of two digits: the draws disagree more on them than on real digits (AUROC about 0.89), better than "
        "the twin's best score (about 0.82)."),
)
