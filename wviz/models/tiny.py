"""Tiny random models of every family wviz opens, saved the way a user's model is (``save_pretrained``): for the
examples, the tests and a browser test's WVIZ_MODELS, without a download.

Each is built from its transformers config class (hidden size 32, 2 layers, 4 heads; 2 key-value heads in the
Llama-style decoders, so grouped-query attention is exercised), with its head (masked-language model, causal LM,
image classifier), random weights from a seed and a larger initialiser range than training would use, so that the
scores spread and the sparse normalisers find exact zeros. Text models get a tokenizer built with the
``tokenizers`` package (encoders: word level over VOCABULARY; decoders: byte-level BPE trained on it); image
models an image processor's config for 32 x 32 pictures (16 patches of 8 x 8).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

__all__ = ["KINDS", "VOCABULARY", "build", "save"]

KINDS = ("bert", "roberta", "xlm-roberta", "distilbert", "electra", "gpt2", "llama", "qwen2", "qwen3", "mistral",
         "vit", "deit")
VOCABULARY = tuple("the a cat dog sat ran on in to mat park sun rain is was and of it he she . ,".split())
_ENCODER = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_DECODER = ("<pad>", "<unk>", "<s>", "</s>")
_DECODERS = ("gpt2", "llama", "qwen2", "qwen3", "mistral")
_VOCAB = {"encoder": len(_ENCODER) + len(VOCABULARY), "decoder": 400}
_SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, initializer_range=0.2)


def _config(kind: str):
    import transformers as tf

    vocab = _VOCAB["decoder" if kind in _DECODERS else "encoder"]
    if kind in ("bert", "roberta", "xlm-roberta", "electra"):
        cls = {"bert": tf.BertConfig, "roberta": tf.RobertaConfig, "xlm-roberta": tf.XLMRobertaConfig,
               "electra": tf.ElectraConfig}[kind]
        extra = dict(embedding_size=32) if kind == "electra" else {}
        return cls(vocab_size=vocab, max_position_embeddings=66, pad_token_id=0, **_SIZE, **extra)
    if kind == "distilbert":
        return tf.DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                                   max_position_embeddings=64, initializer_range=0.2, pad_token_id=0)
    if kind == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64, initializer_range=0.2,
                             bos_token_id=3, eos_token_id=3)
    if kind in ("llama", "qwen2", "qwen3", "mistral"):
        cls = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config,
               "mistral": tf.MistralConfig}[kind]
        return cls(vocab_size=vocab, num_key_value_heads=2, head_dim=8, max_position_embeddings=64, pad_token_id=0,
                   bos_token_id=2, eos_token_id=3, tie_word_embeddings=False, **_SIZE)
    cls = {"vit": tf.ViTConfig, "deit": tf.DeiTConfig}[kind]
    labels = ["circle", "square", "triangle", "star", "cross", "ring", "dot"]
    return cls(image_size=32, patch_size=8, num_labels=len(labels), id2label=dict(enumerate(labels)), **_SIZE)


def _word_level():
    """An encoder's tokenizer: BERT's special tokens around whole words of VOCABULARY."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(_ENCODER + tuple(VOCABULARY))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                              ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def _byte_level(kind: str):
    """A decoder's tokenizer: byte-level BPE (as GPT-2's, Llama 3's and Qwen2's) trained on sentences of
    VOCABULARY; Llama-style tokenizers start every text with <s> (GPT-2's and Qwen2's add nothing). Qwen2's is
    transformers' Qwen2Tokenizer, which transformers 5 always builds for that model_type."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(_DECODER), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    words = list(VOCABULARY)
    tk.train_from_iterator(words + [" ".join(words[i:] + words[:i]) for i in range(len(words))], trainer)
    specials = dict(unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    if kind == "qwen2":
        merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                  for m in json.loads(tk.to_str())["model"]["merges"]]
        return Qwen2Tokenizer(vocab=tk.get_vocab(), merges=merges, **specials)
    if kind != "gpt2":
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, **specials)


def _tokenizer(kind: str):
    return _byte_level(kind) if kind in _DECODERS else _word_level()


def build(kind: str, seed: int = 0):
    """(model, tokenizer or image processor) of a tiny random ``kind`` (one of KINDS) with its head, in eval mode.

    >>> from wviz.models.tiny import build
    >>> model, tokenizer = build("gpt2")
    >>> type(model).__name__, model.config.num_hidden_layers, tokenizer.tokenize("the cat sat")
    ('GPT2LMHeadModel', 2, ['the', 'Ġcat', 'Ġsat'])
    """
    import transformers as tf

    if kind not in KINDS:
        raise ValueError(f"unknown tiny model {kind!r}; choose one of {', '.join(KINDS)}")
    config = _config(kind)
    torch.manual_seed(seed)
    if kind in ("vit", "deit"):
        cls = tf.ViTForImageClassification if kind == "vit" else tf.DeiTForImageClassificationWithTeacher
        processor = (tf.ViTImageProcessor if kind == "vit" else tf.DeiTImageProcessor)(
            size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32})
        return cls(config).eval(), processor
    auto = tf.AutoModelForCausalLM if kind in _DECODERS else tf.AutoModelForMaskedLM
    return auto.from_config(config).eval(), _tokenizer(kind)


def save(kind: str, folder, seed: int = 0, head: bool = True) -> Path:
    """Save a tiny random ``kind`` into ``folder`` (created) as ``save_pretrained`` does: config.json,
    model.safetensors, and the tokenizer's or image processor's files; without its head when ``head`` is False.
    Returns the folder.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from wviz.models.tiny import save
    >>> sorted(p.name for p in save("vit", Path(tempfile.mkdtemp()) / "tiny-vit").iterdir())
    ['config.json', 'model.safetensors', 'preprocessor_config.json']
    """
    folder = Path(folder)
    model, companion = build(kind, seed)
    if not head:
        model = model.base_model
    model.save_pretrained(folder)
    companion.save_pretrained(folder)
    return folder
