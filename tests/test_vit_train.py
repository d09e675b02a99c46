"""wviz.vit.train: a few steps lower the loss; the CLI writes a loadable checkpoint with its record; resume."""
import torch

from wviz.vit import data, train
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.model import ViTConfig, build_model, loss_fn


def test_a_few_steps_lower_the_loss():
    torch.manual_seed(0)
    x, y = data.load_dataset("digits", "train")
    x, y = x[:256], y[:256]
    for kind, lam in (("stochastic", 0.1), ("deterministic", 0.0)):
        model = build_model(ViTConfig(kind=kind, dim=16, depth=1, heads=2))
        torch.manual_seed(1)
        before = loss_fn(model.eval(), x, y)[0].item()
        train.train_steps(model, x, y, steps=40, lr=1e-2, lam=lam)
        torch.manual_seed(1)
        after = loss_fn(model.eval(), x, y)[0].item()
        assert after < before - 0.3, (kind, before, after)


def test_cli_writes_checkpoint_and_resumes(tmp_path):
    out = str(tmp_path / "tiny.safetensors")
    common = ["--data", "digits", "--limit", "64", "--batch", "32", "--dim", "8", "--depth", "1", "--heads", "2",
              "--no-eval", "--no-progress", "--threads", "1", "--out", out]
    rec = train.main(common + ["--epochs", "1"])
    model, record = load_checkpoint(out)
    assert record == rec and record["epochs"] == 1 and record["class_names"] == [str(i) for i in range(10)]
    assert model.config.dim == 8 and not (tmp_path / "tiny.safetensors.state.pt").exists()
    # an interrupted run leaves its state; --resume continues at the next epoch
    state = tmp_path / "tiny.safetensors.state.pt"
    torch.save({"model": model.state_dict(), "optim": torch.optim.AdamW(model.parameters()).state_dict(),
                "sched": {"last_epoch": 2, "base_lrs": [2e-3], "_last_lr": [2e-3], "_step_count": 3,
                          "verbose": False, "_get_lr_called_within_step": False, "lr_lambdas": [None]},
                "scaler": {}, "epoch": 1, "seconds": 1.0, "config": model.config.to_dict()}, state)
    rec2 = train.main(common + ["--epochs", "2", "--resume"])
    assert rec2["epochs"] == 2 and rec2["train_seconds"] >= 1.0
    loaded, _ = load_checkpoint(out)
    assert not all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
