"""Train a stochastic ViT (or its deterministic twin) and save a checkpoint with its evaluation.

    python -m wviz.vit.train --data digits --epochs 40 --out assets/vit_digits_stochastic.safetensors
    python -m wviz.vit.train --data digits --kind deterministic --epochs 40 \
        --out assets/vit_digits_deterministic.safetensors
    torchrun --nproc_per_node 4 -m wviz.vit.train --data cifar10 --data-root ~/data --epochs 100 --out cifar.safetensors

Device: --device auto|cpu|cuda (auto = CUDA when available, see wviz.device); mixed precision (bf16, or fp16 with
a gradient scaler) on CUDA unless --no-amp. Under torchrun (WORLD_SIZE > 1) each process takes one GPU (LOCAL_RANK)
and the model is wrapped in torch's DistributedDataParallel (NCCL on GPUs, gloo on CPUs); rank 0 shows the progress
bar and writes the files. After every epoch the training state (weights, optimiser, schedule, epoch) goes to
<out>.state.pt; --resume continues from it and the file is removed once the checkpoint is written.

A user's mistake (an option out of range, a data folder missing or laid out otherwise, no state to resume) ends the
command with one line, "python -m wviz.vit.train: error: ...", and exit status 2, as argparse does; a traceback
means a bug.

Loss: the first --pretrain-epochs epochs are self-supervised, 004's masked-patch W2 term or its likelihood form
(--pretrain-term, :func:`wviz.vit.model.pretrain_loss`); the --epochs after them fine-tune with cross-entropy on each
image and an augmented view of it (every model, the twin too, unless --no-augment) + lambda x 004's Wasserstein
fine-tuning regulariser (:func:`wviz.vit.model.loss_fn`). Both add --kl x the standard normal prior on the
embeddings' variances (:func:`wviz.vit.model.covariance_kl`). One warm-up + cosine schedule spans all epochs.
--rule and --layer0 choose how the covariance travels and what the embeddings' variances are (wviz.vit.model);
--val-fraction holds out a validation split of the training images.

Evaluation: S = --eval-samples draws at --eval-seeds Monte-Carlo seeds (the record's numbers are their means, each
seed's kept under metrics.mc); --twin adds the paired bootstrap intervals of the differences to a deterministic
checkpoint, --occlusion-images the AUROC of the MI-occlusion score (docs/TRAINING.md). --evaluate CHECKPOINT runs
only this evaluation, on a checkpoint trained before (e.g. with --no-eval, or again at a larger S on a GPU).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, TensorDataset

from wviz.device import get_device
from wviz.vit import data as vdata, mnist
from wviz.vit.checkpoint import load_checkpoint, save_checkpoint
from wviz.vit.evaluate import (covariate_shift, evaluate, evaluate_seeds, occlusion_aurocs, summary_seeds,
                               twin_intervals)
from wviz.vit.model import (LAYER0, MAX_PROTOTYPES, RULES, TERMS, ViTConfig, build_model, fit_prototypes, loss_fn,
                            pretrain_loss)

__all__ = ["parse_args", "main", "train_steps"]


PROG = "python -m wviz.vit.train"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line and exit status 2 (argparse's own error prints the whole usage first, a dozen lines here)."""
        message = " ".join(str(message).split())  # one line, whatever the message held
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="digits", choices=vdata.DATASETS)
    p.add_argument("--data-root", default=None, help="folder with the CIFAR python folders or class folders")
    p.add_argument("--kind", default="stochastic", choices=("stochastic", "deterministic"))
    p.add_argument("--epochs", type=int, default=40, help="supervised (fine-tuning) epochs")
    p.add_argument("--pretrain-epochs", type=int, default=0,
                   help="self-supervised epochs before them: 004's masked-patch W2 term (stochastic model only)")
    p.add_argument("--mask-ratio", type=float, default=0.5, help="fraction of patches masked in pre-training")
    p.add_argument("--batch", type=int, default=64, help="global batch size (split across processes)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--lam", type=float, default=0.1, help="weight lambda of the W2 regulariser (0: off)")
    p.add_argument("--kl", type=float, default=0.0,
                   help="weight of the standard normal prior on the embeddings' variances (0: off)")
    p.add_argument("--rule", default="004", choices=RULES,
                   help="how a block propagates the covariance: 004's (A*A) Sigma_v, or the moment-matched mixture")
    p.add_argument("--layer0", default="eq5", choices=LAYER0,
                   help="the embeddings' variances: eq. (5), or eq. (5) + kappa x the distance to the nearest of "
                        "--prototypes k-means prototypes of the training patches")
    p.add_argument("--prototypes", type=int, default=64, help="K, the prototypes of --layer0 prototypes")
    p.add_argument("--kappa", type=float, default=0.02,
                   help="--layer0 prototypes: the mean extra variance per dimension of a training patch")
    p.add_argument("--pretrain-term", default="w2", choices=TERMS,
                   help="the masked-patch term's pull: 004's -log sigma(-W2^2), or the Gaussian NLL")
    p.add_argument("--finetune-term", default="w2", choices=TERMS,
                   help="the fine-tuning term's pull: 004's -log sigma(-W2^2), or the Gaussian NLL")
    p.add_argument("--val-fraction", type=float, default=0.0,
                   help="hold out this fraction of the training split as a validation split (not trained on)")
    p.add_argument("--no-augment", action="store_true",
                   help="cross-entropy on the images only (default: on the images and an augmented view of each, "
                        "for every model; the W2 term's positives are those views)")
    p.add_argument("--dim", type=int, default=48)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--mlp-ratio", type=int, default=2)
    p.add_argument("--image-size", type=int, default=32, help="'folder' data only: images are resized to this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-amp", action="store_true", help="full float32 on CUDA too")
    p.add_argument("--eval-samples", type=int, default=16, help="Monte-Carlo samples of the final evaluation")
    p.add_argument("--eval-seeds", type=int, default=1,
                   help="Monte-Carlo seeds 0..N-1 of the final evaluation: its numbers are their means")
    p.add_argument("--twin", default=None,
                   help="a deterministic checkpoint: the record gets bootstrap intervals of the differences to it")
    p.add_argument("--occlusion-images", type=int, default=0,
                   help="measure the MI-occlusion score's AUROC on the first N images of each set (0: not)")
    p.add_argument("--evaluate", default=None, metavar="CHECKPOINT",
                   help="no training: the final evaluation of CHECKPOINT (trained before on --data), at this "
                        "command's evaluation options, its weights and training record kept, written to --out")
    p.add_argument("--limit", type=int, default=0, help="train on the first N images only (quick checks)")
    p.add_argument("--no-eval", action="store_true", help="skip the final evaluation (quick checks)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.state.pt")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True, help="checkpoint to write (.safetensors)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """The command line's options; a bad one ends the command with one error line and exit status 2."""
    p = _parser()
    args = p.parse_args(argv)
    if not args.out.endswith(".safetensors"):
        p.error("--out must end in .safetensors")
    if args.kind == "deterministic" and (args.pretrain_epochs or args.kl or args.rule != "004"
                                         or args.layer0 != "eq5"):
        p.error("--pretrain-epochs, --kl, --rule and --layer0 act on Gaussian embeddings: stochastic model only")
    if not 0 < args.mask_ratio < 1:
        p.error("--mask-ratio must be between 0 and 1")
    if not 0 <= args.val_fraction <= 0.5:
        p.error(f"--val-fraction must be from 0 to 0.5, got {args.val_fraction}")
    if args.no_augment and args.lam and args.kind == "stochastic":
        p.error("--lam needs the augmented views (its positives): drop --no-augment or set --lam 0")
    if not 1 <= args.prototypes <= MAX_PROTOTYPES:
        p.error(f"--prototypes must be from 1 to {MAX_PROTOTYPES}, got {args.prototypes}")
    if not 0 <= args.kappa <= 100:
        p.error(f"--kappa must be from 0 to 100, got {args.kappa}")
    if not 1 <= args.eval_seeds <= 16:
        p.error(f"--eval-seeds must be from 1 to 16, got {args.eval_seeds}")
    for name, lo, hi in (("epochs", 0, None), ("pretrain_epochs", 0, None), ("limit", 0, None), ("threads", 0, None),
                         ("batch", 1, None), ("eval_samples", 1, 4096), ("lr", 1e-12, None), ("weight_decay", 0, None),
                         ("lam", 0, None), ("kl", 0, None)):
        value = getattr(args, name)
        if value < lo or (hi is not None and value > hi):
            flag = "--" + name.replace("_", "-")
            p.error(f"{flag} must be {'positive' if lo == 1e-12 else f'at least {lo}'}"
                    + (f" and at most {hi}" if hi is not None else "") + f", got {value}")
    if args.evaluate and args.no_eval:
        p.error("--evaluate runs only the evaluation: drop --no-eval")
    if args.data not in vdata.SHIPPED and args.data_root is None:
        p.error(f"--data {args.data} is read from a local folder: give it with --data-root (nothing is downloaded)")
    return args


def _fail(err: Exception):
    """A user's mistake found after the options were read: one line and exit status 2, as the options' errors."""
    message = " ".join(str(err).split())
    _parser().exit(2, f"{PROG}: error: {message}\n")


def _distributed(device: torch.device) -> tuple[int, int, int]:
    """(rank, world size, local rank); starts the process group under torchrun: NCCL for GPU training, gloo for
    CPU training (also on a machine that has a GPU but was told --device cpu)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, 0
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0"))


def _amp(device: torch.device, enabled: bool):
    """(autocast context, gradient scaler): bf16 where the GPU has it, else fp16 with loss scaling; off on CPU."""
    if device.type != "cuda" or not enabled:
        return nullcontext(), torch.amp.GradScaler("cuda", enabled=False)
    bf16 = torch.cuda.is_bf16_supported()
    ctx = torch.autocast("cuda", dtype=torch.bfloat16 if bf16 else torch.float16)
    return ctx, torch.amp.GradScaler("cuda", enabled=not bf16)


def _schedule(optimizer, total: int):
    """Linear warm-up over 5 % of the steps, then cosine decay to zero."""
    warm = max(1, total // 20)

    def factor(step):
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_steps(model, images, labels, steps: int, lr: float = 2e-3, lam: float = 0.1, batch: int = 64,
                seed: int = 0) -> list[float]:
    """Plain AdamW steps on random batches (no schedule): the loss of each step. For tests and notebooks."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(images), (batch,), generator=g)
        x, y = images[idx], labels[idx]
        loss, _ = loss_fn(model, x, y, vdata.augment(x, g), lam)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@dataclass(frozen=True)
class _Place:
    """Where this process trains: its device, its rank among ``world`` processes and its local rank (GPU)."""

    device: torch.device
    rank: int
    world: int
    local: int


def _place(args) -> _Place:
    """Torch threads, the device and, under torchrun, the process group (one GPU per process)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = get_device(args.device)
    rank, world, local = _distributed(device)
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    return _Place(device, rank, world, local)


@dataclass(frozen=True)
class _Data:
    """The training split (the first --limit images only when given, less the --val-fraction validation split),
    its class names, the test split (None with --no-eval), read before training starts so that a bad test folder
    is found at once, and the validation images (None without: the Fisher combination's reference)."""

    x: torch.Tensor
    y: torch.Tensor
    names: list[str]
    test: tuple[torch.Tensor, torch.Tensor] | None
    validation: torch.Tensor | None


def _training_data(args) -> _Data:
    x, y = vdata.load_dataset(args.data, "train", args.data_root, size=args.image_size)
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    x, y, xv, _ = vdata.carve_validation(x, y, args.val_fraction)
    test = None if args.no_eval else vdata.load_dataset(args.data, "test", args.data_root, size=args.image_size)
    return _Data(x, y, vdata.class_names(args.data, args.data_root), test, xv if len(xv) else None)


@dataclass
class _Training:
    """The model and what steps it: optimiser, schedule, mixed precision; ``net`` is the model, or its DDP wrapper
    under torchrun. ``start`` (epoch) and ``seconds`` (of training so far) move on as the epochs run."""

    cfg: ViTConfig
    model: torch.nn.Module
    net: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    autocast: AbstractContextManager
    scaler: torch.amp.GradScaler
    dataset: TensorDataset
    per_rank: int
    steps_per_epoch: int
    start: int = 0
    seconds: float = 0.0


def _model(args, x, y, n_classes: int, place: _Place) -> _Training:
    """The model (seeded with --seed), AdamW, the warm-up + cosine schedule over all steps, mixed precision."""
    stochastic = args.kind == "stochastic"
    protos = stochastic and args.layer0 == "prototypes"
    cfg = ViTConfig(kind=args.kind, image_size=x.shape[-1], patch_size=args.patch, channels=x.shape[1],
                    n_classes=n_classes, dim=args.dim, depth=args.depth, heads=args.heads, mlp_ratio=args.mlp_ratio,
                    rule=args.rule if stochastic else "004", layer0="prototypes" if protos else "eq5",
                    prototypes=args.prototypes if protos else 0)
    torch.manual_seed(args.seed)
    model = build_model(cfg).to(place.device)
    if protos:
        fit_prototypes(model, x.to(place.device), args.kappa, seed=args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    dataset = TensorDataset(x, y)
    per_rank = max(1, args.batch // place.world)
    steps_per_epoch = math.ceil(len(dataset) / place.world / per_rank)
    sched = _schedule(opt, (args.pretrain_epochs + args.epochs) * steps_per_epoch)
    autocast, scaler = _amp(place.device, not args.no_amp)
    return _Training(cfg, model, model, opt, sched, autocast, scaler, dataset, per_rank, steps_per_epoch)


def _resume(t: _Training, state_path: Path, device: torch.device) -> None:
    """Continue from the training state of an interrupted run (--resume)."""
    if not state_path.is_file():
        raise ValueError(f"--resume: no training state at {state_path}")
    state = torch.load(state_path, map_location=device, weights_only=True)
    if state["config"] != t.cfg.to_dict():
        raise ValueError(f"--resume: {state_path} was made with another model config: {state['config']}")
    t.model.load_state_dict(state["model"])
    t.opt.load_state_dict(state["optim"])
    t.sched.load_state_dict(state["sched"])
    t.scaler.load_state_dict(state["scaler"])
    t.start, t.seconds = state["epoch"], state["seconds"]


def _save_state(t: _Training, epoch: int, state_path: Path) -> None:
    """The state after ``epoch`` (0-based), for --resume."""
    torch.save({"model": t.model.state_dict(), "optim": t.opt.state_dict(), "sched": t.sched.state_dict(),
                "scaler": t.scaler.state_dict(), "epoch": epoch + 1, "seconds": t.seconds,
                "config": t.cfg.to_dict()}, state_path)


def _step_loss(t: _Training, args, epoch: int, xb, yb, g: torch.Generator):
    """Epochs before --pretrain-epochs: the masked-patch term (pretrain_loss, no labels); after: cross-entropy +
    lambda x the W2 regulariser (loss_fn) on augmented views."""
    if epoch < args.pretrain_epochs:
        return pretrain_loss(t.net, xb, args.mask_ratio, args.kl, generator=g, term=args.pretrain_term)
    views = None if args.no_augment else vdata.augment(xb)
    return loss_fn(t.net, xb, yb, views, args.lam if args.kind == "stochastic" else 0.0, args.kl, args.finetune_term)


def _epoch(t: _Training, args, epoch: int, place: _Place, bar) -> None:
    """One pass over the training images (:func:`_step_loss`). The batch order depends on (seed, epoch) only, so a
    resumed run sees the same batches."""
    g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
    torch.manual_seed(args.seed * 1000 + epoch * 7 + place.rank)  # embedding samples
    sampler = (DistributedSampler(t.dataset, place.world, place.rank, seed=args.seed) if place.world > 1
               else RandomSampler(t.dataset, generator=g))
    if place.world > 1:
        sampler.set_epoch(epoch)
    t.net.train()
    mask_g = torch.Generator(device=place.device).manual_seed(args.seed * 1000 + epoch)
    for xb, yb in DataLoader(t.dataset, batch_size=t.per_rank, sampler=sampler):
        xb, yb = xb.to(place.device, non_blocking=True), yb.to(place.device, non_blocking=True)
        with t.autocast:
            loss, parts = _step_loss(t, args, epoch, xb, yb, mask_g)
        t.opt.zero_grad(set_to_none=True)
        t.scaler.scale(loss).backward()
        t.scaler.step(t.opt)
        t.scaler.update()
        t.sched.step()
        bar.update()
        bar.set_postfix(epoch=epoch + 1, **{k: f"{v:.3f}" for k, v in parts.items()})


def _loop(t: _Training, args, place: _Place, state_path: Path) -> None:
    """The epochs from t.start to --pretrain-epochs + --epochs, the state saved after each (rank 0)."""
    from tqdm import tqdm

    epochs = args.pretrain_epochs + args.epochs
    bar = tqdm(total=epochs * t.steps_per_epoch, initial=t.start * t.steps_per_epoch, unit="step",
               disable=place.rank != 0 or args.no_progress, desc=f"{args.kind} ViT on {args.data}")
    for epoch in range(t.start, epochs):
        t0 = time.perf_counter()
        _epoch(t, args, epoch, place, bar)
        t.seconds += time.perf_counter() - t0
        if place.rank == 0:
            _save_state(t, epoch, state_path)
    bar.close()


def _record(args, argv, t: _Training, n_images: int, names: list[str], place: _Place) -> dict:
    """What the checkpoint records of its training (the Uncertainty inspector lists it), with what a page needs
    to find its data again: the dataset, the name of its root folder (no path: where it lies is the server's
    WVIZ_DATA), the class names, the images' channels and size."""
    folder = Path(args.data_root).expanduser().resolve().name if args.data_root else None
    return {"data": args.data, "data_folder": folder, "channels": t.cfg.channels, "image_size": t.cfg.image_size,
            "epochs": args.epochs, "pretrain_epochs": args.pretrain_epochs,
            "mask_ratio": args.mask_ratio if args.pretrain_epochs else None, "seed": args.seed,
            "lambda": args.lam if args.kind == "stochastic" else 0.0, "kl": args.kl, "batch": args.batch, "lr": args.lr,
            "augment": not args.no_augment, "val_fraction": args.val_fraction,
            "pretrain_term": args.pretrain_term if args.pretrain_epochs else None,
            "finetune_term": args.finetune_term if args.kind == "stochastic" and args.lam else None,
            "kappa": args.kappa if t.cfg.layer0 == "prototypes" else None,
            "train_images": n_images, "class_names": names, "train_seconds": round(t.seconds, 1),
            "device": str(place.device), "processes": place.world, "torch": torch.__version__,
            "eval_samples": args.eval_samples, "eval_seeds": args.eval_seeds,
            "command": "python -m wviz.vit.train " + " ".join(sys.argv[1:] if argv is None else argv)}


def _evaluate(args, model, test: tuple[torch.Tensor, torch.Tensor], device: torch.device,
              reference: torch.Tensor | None = None) -> dict:
    """The report's numbers on the test split (004's protocol): the digits' OOD sets (the held-out letters
    included), MNIST's near and far sets and its MNIST-C corruptions (wviz.vit.mnist), or those made for the split's
    own images (vdata.ood_sets); at --eval-seeds Monte-Carlo seeds, their means and per-seed values
    (summary_seeds); with --twin the bootstrap intervals of the differences to it; with --occlusion-images the
    AUROC of the MI-occlusion score per seed; with ``reference`` (the validation images) the Fisher combination."""
    xt, yt = test
    shipped = args.data in vdata.SHIPPED
    ood = vdata.shipped_ood_sets(args.data, len(xt)) if shipped else vdata.ood_sets(xt, yt)
    kinds = mnist.CORRUPTIONS if args.data == "mnist" else vdata.CORRUPTIONS
    reports = evaluate_seeds(model, xt.to(device), yt, ood, args.eval_samples, args.eval_seeds, kinds,
                             None if reference is None else reference.to(device))
    metrics = summary_seeds(reports)
    if args.data == "mnist":   # other writers: reported apart from the OOD sets, the model should still name them
        metrics["covariate_shift"] = covariate_shift(model, reports[0].test_scores(), *mnist.shifted_digits(),
                                                     args.eval_samples)
    if args.twin:
        twin, _ = load_checkpoint(args.twin, device=device)
        metrics["vs_twin"] = twin_intervals(reports, evaluate(twin, xt.to(device), yt, ood, corruptions=()), yt)
    if args.occlusion_images and model.config.kind == "stochastic":
        metrics["occlusion_auroc"] = occlusion_aurocs(model, xt, ood, args.occlusion_images, args.eval_samples,
                                                      args.eval_seeds)
    return metrics


def _save(model, out: Path, record: dict, state_path: Path) -> None:
    save_checkpoint(model, out, record)
    state_path.unlink(missing_ok=True)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} kB); metrics: {record.get('metrics')}", flush=True)


def _validation(args, record: dict, size: int) -> torch.Tensor | None:
    """The validation images a checkpoint's record says it held out of the training split (carved from the whole
    split, as the Uncertainty inspector's calibration panel does), None without."""
    if not record.get("val_fraction"):
        return None
    return vdata.validation_split(args.data, record["val_fraction"], args.data_root, size)[0]


def _evaluate_only(args, argv) -> dict:
    """--evaluate: the checkpoint's weights and training record, with this command's evaluation (its options and
    command added to the record), written to --out; returns the record."""
    try:
        place = _place(args)
        if place.world > 1:
            raise ValueError("--evaluate runs in one process: start it without torchrun")
        model, record = load_checkpoint(args.evaluate, device=place.device)
        if record.get("data", "digits") != args.data:
            raise ValueError(f"{args.evaluate} was trained on --data {record.get('data', 'digits')}, not {args.data}")
        test = vdata.load_dataset(args.data, "test", args.data_root, size=model.config.image_size)
    except ValueError as err:
        _fail(err)
    model.eval()
    record.update(eval_samples=args.eval_samples, eval_seeds=args.eval_seeds,
                  evaluation_command=f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv))
    record["metrics"] = _evaluate(args, model, test, place.device, _validation(args, record, model.config.image_size))
    save_checkpoint(model, Path(args.out), record)
    print(f"wrote {args.out}; metrics: {record['metrics']}", flush=True)
    return record


def main(argv=None) -> dict:
    """Train, evaluate on the test split, write the checkpoint; returns the record (on rank 0). With --evaluate,
    only the evaluation of a checkpoint trained before."""
    args = parse_args(argv)
    if args.evaluate:
        return _evaluate_only(args, argv)
    out, state_path = Path(args.out), Path(args.out + ".state.pt")
    try:
        place = _place(args)
        d = _training_data(args)
        t = _model(args, d.x, d.y, len(d.names), place)
        if args.resume:
            _resume(t, state_path, place.device)
    except ValueError as err:  # the data, the device, the model's shape or the state to resume: the user's to fix
        _fail(err)
    if place.world > 1:
        t.net = torch.nn.parallel.DistributedDataParallel(
            t.model, device_ids=[place.local] if place.device.type == "cuda" else None)
    _loop(t, args, place, state_path)
    if place.world > 1:
        # every rank leaves the group together, before rank 0's evaluation, and drops DDP (whose reducer holds
        # the group): a gloo rank torn down while its peer still holds the connection aborted once in CI
        dist.barrier()
        t.net = t.model
        dist.destroy_process_group()
    record = {}
    if place.rank == 0:
        t.model.eval()
        record = _record(args, argv, t, len(d.x), d.names, place)
        if d.test is not None:   # None with --no-eval
            record["metrics"] = _evaluate(args, t.model, d.test, place.device, d.validation)
        _save(t.model, out, record, state_path)
    return record


if __name__ == "__main__":
    main()
