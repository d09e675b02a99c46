"""Real pretrained models whose attention wviz can open up and re-normalise (see wviz.models.minilm)."""
