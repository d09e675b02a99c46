"""Stochastic Vision Transformer of 004: model (Gaussian tokens, W2 attention), data, training CLI, safe
checkpoints, metrics and evaluation. ``python -m wviz.vit.train --help`` trains one."""
