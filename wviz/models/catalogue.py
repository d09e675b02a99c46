"""The models the pages that open a real transformer offer (Real transformer; Heads solve the dual, encoders only),
and what they say of each: the bundled MiniLM, the model folders of WVIZ_MODELS (wviz.models.hub finds them), an
upload; the selector's options, the model a link names, the model's size and limits, one sentence on what the Real
transformer page shows of it.
"""
from __future__ import annotations

from wviz.models import families, hub, lens as lenses, safety

__all__ = ["UPLOAD", "of_families", "of_family", "options", "from_url", "info", "upload_cap_mb", "token_limit",
           "shape", "patch_grid", "about"]

UPLOAD = "upload"   # the selector's choice of an uploaded .zip (never part of a link)


def of_families(found: hub.Catalogue, families) -> hub.Catalogue:
    """The models of ``found`` whose family is one of ``families``, which hold "encoder" (the bundled MiniLM, first).

    >>> from wviz.models import catalogue, hub
    >>> [m.name for m in catalogue.of_families(hub.find_models([]), ("encoder",)).models]
    ['all-MiniLM-L6-v2']
    """
    return hub.Catalogue(tuple(m for m in found.models if m.family in families), found.skipped)


def of_family(lens: hub.Lens, families) -> hub.Lens:
    """``lens`` if its family is one of ``families``; else ValueError naming the families the page opens."""
    if lens.family not in families:
        raise ValueError(f"{lens.info.name} is a model of the {lens.family} family; this page opens "
                         f"{' and '.join(families)} models only")
    return lens


def options(found: hub.Catalogue) -> dict[str, str]:
    """The selector's options: each model's key -> its label (folder name, family, size), the bundled MiniLM
    first, then the upload.

    >>> from wviz.models import catalogue, hub
    >>> catalogue.options(hub.find_models([]))
    {'bundled': 'all-MiniLM-L6-v2 (encoder, 22.7M parameters)', 'upload': 'Upload a model (.zip)'}
    """
    return {**{m.key: m.label() for m in found.models}, UPLOAD: "Upload a model (.zip)"}


def from_url(value: str | None, found: hub.Catalogue) -> tuple[str, str | None]:
    """The key of the model a link names (its ``model`` parameter: a key of the catalogue), and a note when this
    server has no such model (the bundled MiniLM is shown instead).

    >>> from wviz.models import catalogue, hub
    >>> catalogue.from_url(None, hub.find_models([]))
    ('bundled', None)
    >>> catalogue.from_url("folder:/gone", hub.find_models([]))[0]
    'bundled'
    """
    keys = [m.key for m in found.models]
    if value is None or value in keys:
        return value or hub.BUNDLED_KEY, None
    return hub.BUNDLED_KEY, (f"The link names a model this server does not have ({value}); the page shows the "
                             f"bundled {hub.BUNDLED}. WVIZ_MODELS lists the folders of the models it has.")


def info(found: hub.Catalogue, key: str) -> hub.ModelInfo:
    """The model of the catalogue with this key; the bundled MiniLM when there is none (a folder gone since)."""
    return next((m for m in found.models if m.key == key), found.models[0])


def upload_cap_mb() -> int:
    """The cap on an uploaded model in MB (WVIZ_MAX_MODEL_MB, default 600)."""
    return safety.max_model_bytes() // 2 ** 20


def token_limit(lens: hub.Lens) -> int:
    """The longest text the page runs on ``lens`` (a text model), in tokens: the model's maximum (512 for
    BERT-family models), at most wviz.models.families.LONGEST."""
    return min(families.token_limit(lens.model.config, lens.tokenizer), families.LONGEST)


def shape(lens: hub.Lens) -> tuple[int, int]:
    """(layers, heads) of the model."""
    config = lens.model.config
    return config.num_hidden_layers, config.num_attention_heads


def patch_grid(lens: hub.Lens) -> tuple[int, int]:
    """(rows, columns) of an image model's patch grid."""
    return lenses.patch_grid(lens.model.config)


_ABOUT = {
    ("encoder", "masked-lm"): "An encoder with its masked-language-model head: its attention, and its top 5 for "
                              "each {mask} in the sentence.",
    ("encoder", None): "An encoder without a masked-language-model head: its attention and its layers' states.",
    ("decoder", "causal-lm"): "A decoder with its language-model head: causal attention, its next token, and the "
                              "perplexity of a paragraph.",
    ("decoder", None): "A decoder without its language-model head: causal attention and its layers' states.",
    ("image", "image-classification"): "An image classifier: its classes, and its class token over the patches.",
    ("image", None): "An image model without its classifier: its attention over the patches.",
}


def about(lens: hub.Lens) -> str:
    """One sentence on what the page shows of this model (its family and whether it has its head)."""
    if lens.info.key == hub.BUNDLED_KEY:
        return "The bundled sentence embedder, a bare BERT encoder (no head): its attention and its layers' states."
    mask = getattr(lens.tokenizer, "mask_token", None) or "[MASK]"
    return _ABOUT[lens.family, lens.head].format(mask=mask)
