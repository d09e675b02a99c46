"""Real pretrained models whose attention wviz can open up and re-normalise: wviz.models.minilm (all-MiniLM-L6-v2
with swappable normalisers), wviz.models.figure4 (Sec. 8 / Figure 4 of 002 on it), wviz.models.corpus (its
sentences)."""
