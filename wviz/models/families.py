"""The model families wviz opens up, and what each reads and predicts.

A family is what a user of the model looks at: an *encoder* (BERT, RoBERTa, DistilBERT, MiniLM, ...: attention maps,
hidden states, the top 5 for a [MASK] when it has a masked-language-model head), a *decoder* (GPT-2, Llama and
Qwen2 style: causal attention, the next token, perplexity) or an *image* classifier (ViT, DeiT: the classes, the
class token's attention over the patches, rollout). In transformers 5.23 these architectures route every layer's
attention through the attention-interface registry (wviz.models.swap), each checked by a tiny model in
tests/test_models_families.py; MPNet, DeBERTa-v2 and BLOOM, among others, do not, and are refused.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

__all__ = ["FAMILIES", "HEADS", "LONGEST", "family_of", "supported", "declared", "key_weight", "token_limit"]

# model_type (config.json) -> family; only types whose attention goes through the registry, each tested
FAMILIES = {
    "bert": "encoder", "roberta": "encoder", "xlm-roberta": "encoder", "distilbert": "encoder",
    "electra": "encoder",
    "gpt2": "decoder", "llama": "decoder", "qwen2": "decoder", "qwen3": "decoder", "mistral": "decoder",
    "vit": "image", "deit": "image",
}
# family -> (the endings of a head class's name in config.json's architectures, the auto class that loads it)
HEADS = {
    "encoder": (("ForMaskedLM",), "AutoModelForMaskedLM"),
    "decoder": (("ForCausalLM", "LMHeadModel"), "AutoModelForCausalLM"),
    "image": (("ForImageClassification", "ForImageClassificationWithTeacher"), "AutoModelForImageClassification"),
}
_NAMES = {"encoder": "encoders (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA; MiniLM is a BERT)",
          "decoder": "decoders (GPT-2, Llama, Qwen2, Qwen3, Mistral)", "image": "image classifiers (ViT, DeiT)"}
LONGEST = 1024  # tokens run by default at most (GPT-2's context): 12 layers x 12 heads x 1024^2 weights = 600 MB


def supported() -> str:
    """The supported families in words, for messages.

    >>> from wviz.models.families import supported
    >>> supported().startswith("encoders (BERT")
    True
    """
    return "; ".join(_NAMES.values())


def family_of(config: dict) -> str:
    """The family of a model from its config.json (a dict): ValueError naming the supported families for a
    model_type whose attention wviz cannot swap, or a configuration it does not read (an encoder made a decoder).

    >>> from wviz.models.families import family_of
    >>> family_of({"model_type": "gpt2"}), family_of({"model_type": "vit"})
    ('decoder', 'image')
    >>> family_of({"model_type": "mpnet"})
    Traceback (most recent call last):
        ...
    ValueError: wviz cannot open a model of type 'mpnet': its attention does not go through transformers' attention registry, or wviz has not been tested on it. Supported: encoders (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA; MiniLM is a BERT); decoders (GPT-2, Llama, Qwen2, Qwen3, Mistral); image classifiers (ViT, DeiT)
    """
    kind = config.get("model_type")
    if not isinstance(kind, str) or kind not in FAMILIES:
        what = f"of type {kind!r}" if isinstance(kind, str) else "without a model_type in its config.json"
        raise ValueError(f"wviz cannot open a model {what}: its attention does not go through transformers' "
                         f"attention registry, or wviz has not been tested on it. Supported: {supported()}")
    if FAMILIES[kind] == "encoder" and (config.get("is_decoder") or config.get("add_cross_attention")):
        raise ValueError(f"this {kind} is configured as a decoder (is_decoder or add_cross_attention in its "
                         "config.json); wviz opens encoders of this type only")
    return FAMILIES[kind]


@functools.cache
def declared(model_type: str) -> dict[str, tuple[Any, bool]]:
    """What transformers' configuration class of a supported ``model_type`` declares of each field of config.json:
    (its default, whether it may be null), under the field's name and the names it answers to (GPT-2's n_head is
    also num_attention_heads). wviz.models.safety fills the sizes a config.json leaves out with these defaults and
    refuses a null where transformers would.

    >>> from wviz.models.families import declared
    >>> declared("gpt2")["num_attention_heads"], declared("mistral")["num_key_value_heads"], declared("gpt2")["n_inner"]
    ((12, False), (8, False), (None, True))
    """
    from transformers import CONFIG_MAPPING

    if model_type not in FAMILIES:
        raise ValueError(f"{model_type!r} is not a model type wviz opens")
    cls = CONFIG_MAPPING[model_type]
    fields = {f.name: (None if f.default is dataclasses.MISSING else f.default, "None" in str(f.type))
              for f in dataclasses.fields(cls)}
    return fields | {alias: fields[name] for alias, name in cls.attribute_map.items() if name in fields}


def token_limit(config, tokenizer=None) -> int:
    """The longest input the model reads, in tokens: its position embeddings (less RoBERTa's offset of
    pad_token_id + 1), no more than the tokenizer's model_max_length when that is set.

    >>> from transformers import BertConfig, RobertaConfig, GPT2Config
    >>> from wviz.models.families import token_limit
    >>> token_limit(BertConfig()), token_limit(RobertaConfig(max_position_embeddings=514)), token_limit(GPT2Config())
    (512, 512, 1024)
    """
    n = int(config.max_position_embeddings)
    if config.model_type in ("roberta", "xlm-roberta"):
        n -= (config.pad_token_id or 0) + 1
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < 10 ** 6:
        n = min(n, declared)
    return n


def _attention_modules(model) -> list:
    """The self-attention modules of a model, in layer order (each holds its key projection)."""
    return [m for m in model.modules() if hasattr(m, "is_causal") and _key_layer(m) is not None]


def _key_layer(module):
    for name in ("key", "k_lin", "k_proj"):
        layer = getattr(module, name, None)
        if isinstance(getattr(layer, "weight", None), torch.Tensor):
            return layer
    return None


def key_weight(model, layer: int):
    """W_K (H d', d) of layer ``layer``'s self-attention: the key projection k_i = W_K x_i + b_K of an encoder
    (BERT's ``key``, DistilBERT's ``k_lin``, ``k_proj`` elsewhere), for Figure 4 of 002 (wviz.models.figure4).

    >>> import torch
    >>> from transformers import DistilBertConfig, DistilBertModel
    >>> from wviz.models.families import key_weight
    >>> model = DistilBertModel(DistilBertConfig(dim=16, n_layers=2, n_heads=2, hidden_dim=32, vocab_size=20))
    >>> tuple(key_weight(model, 1).shape), key_weight(model, 1) is model.transformer.layer[1].attention.k_lin.weight
    ((16, 16), True)
    """
    modules = _attention_modules(model)
    if not 0 <= layer < len(modules):
        raise ValueError(f"layer must be 0 to {len(modules) - 1}, got {layer}")
    return _key_layer(modules[layer]).weight
