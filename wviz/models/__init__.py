"""Real pretrained models whose attention wviz can open up and re-normalise.

Any local Hugging Face model of a supported family (wviz.models.families: encoders, decoders, image classifiers):
wviz.models.hub finds (WVIZ_MODELS) and loads them (offline, never their own code), wviz.models.safety checks
folders and uploads, wviz.models.swap puts wviz's attention function into transformers' registry,
wviz.models.normalisers holds the normalisers (softmax / tau, sparsemax, entmax, Sinkhorn, causal Sinkhorn),
wviz.models.lens runs a model on text or pictures (the notebook API), wviz.models.tasks reads its predictions,
wviz.models.sinks its attention sinks, wviz.models.catalogue says which models the Real transformer page offers and
what it shows of each, wviz.models.tiny builds tiny random models of each family.
The bundled all-MiniLM-L6-v2: wviz.models.minilm, wviz.models.figure4 (Sec. 8 / Figure 4 of 002, on any encoder),
wviz.models.corpus (its sentences, and a paragraph for perplexity)."""
