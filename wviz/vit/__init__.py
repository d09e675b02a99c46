"""Stochastic Vision Transformer of 004: model (Gaussian tokens, W2 attention), data, training CLI, safe
checkpoints, metrics and evaluation; and what a page reads off a model: inspection (covariances and attention per
layer for one image), rollout, patches (the patch grid and its corruption), demo (the bundled pair, uploads and
the test split a model reads), panel (a model's evaluation on that split), maps (what each per-patch map shows and
its AUROC), occlusion (the MI-occlusion map), calibration (temperature, risk-coverage, conformal sets), intervals
(bootstrap intervals), ablation (the recipes over seeds); shapes, a dataset drawn in a second.
``python -m wviz.vit.train --help`` trains one."""
