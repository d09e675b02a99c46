"""What the Uncertainty inspector's page tests share: the page, the bundled models read directly, a tiny upload."""
import torch

from wviz.views import uncertainty_inspector as views
from wviz.vit.checkpoint import load_checkpoint, save_checkpoint
from wviz.vit.model import ViTConfig, build_model

PAGE = "uncertainty_inspector.py"
DIGITS = {views.Keys.DEMO: "digits"}   # the query of the 8 x 8 digits pair (the page opens on MNIST's)


def bundled_models(dataset: str = "digits"):
    """The bundled checkpoints of ``dataset`` read directly: kind -> (model, record)."""
    return {k: load_checkpoint(p) for k, p in views.BUNDLED[dataset].items()}


def tiny_upload(tmp_path, record: dict, **config) -> bytes:
    """A small untrained checkpoint (seeded) as the bytes of an upload."""
    torch.manual_seed(0)
    model = build_model(ViTConfig(**{"dim": 8, "depth": 1, "heads": 2, **config}))
    return save_checkpoint(model, tmp_path / "tiny.safetensors", record).read_bytes()
