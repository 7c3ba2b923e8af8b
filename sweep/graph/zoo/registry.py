"""Model names, their default sequence lengths, and the cached look-up."""

from __future__ import annotations

import functools
import numbers
from typing import Callable

from collections.abc import Mapping

from . import alexnet, bert, decoder, googlenet, gpt2, inception, resnet, vgg
from .decoder import DecoderShape
from .model import Model
from .model_file import is_model_file, load_model_file
from sweep.errors import SpecError, closest


class UnknownModelError(ValueError):
    """Raised for a model name that is not in :data:`MODEL_NAMES`."""


# GPT-3 (Brown et al. 2020, "Language Models are Few-Shot Learners", Table
# 2.1: n_layers, d_model, n_heads; n_ctx 2048, GPT-2's vocabulary). The
# table's d_model of 5140 for 13B is used as published (40 heads x 128 = 5120).
GPT3_CONTEXT = 2048
GPT3 = {
    "gpt3_1.3b": DecoderShape(layers=24, hidden=2048, heads=24, vocab=gpt2.VOCAB_SIZE, positions=GPT3_CONTEXT),
    "gpt3_6.7b": DecoderShape(layers=32, hidden=4096, heads=32, vocab=gpt2.VOCAB_SIZE, positions=GPT3_CONTEXT),
    "gpt3_13b": DecoderShape(layers=40, hidden=5140, heads=40, vocab=gpt2.VOCAB_SIZE, positions=GPT3_CONTEXT),
}

# The parametric GPT-style decoder (`model = "transformer"`, keys transformer.*).
TRANSFORMER = "transformer"
TRANSFORMER_DEFAULT_SEQ_LEN = 1024
TRANSFORMER_KEYS = ("transformer.layers", "transformer.hidden", "transformer.heads", "transformer.ffn",
                    "transformer.vocab")
TRANSFORMER_REQUIRED = ("transformer.layers", "transformer.hidden", "transformer.heads")

# name -> (builder taking seq_len (ignored by CNNs), max positions or None for CNNs)
_BUILDERS: dict[str, tuple[Callable[[int | None], Model], int | None]] = {
    "alexnet": (lambda _: alexnet.build(), None),
    "googlenet": (lambda _: googlenet.build(), None),
    "inception_v3": (lambda _: inception.build(), None),
    "resnet50": (lambda _: resnet.build("resnet50"), None),
    "resnet101": (lambda _: resnet.build("resnet101"), None),
    "resnet152": (lambda _: resnet.build("resnet152"), None),
    "vgg16": (lambda _: vgg.build_vgg16(), None),
    "bert_base": (lambda s: bert.build("bert_base", s), bert.MAX_POSITIONS),
    "bert_large": (lambda s: bert.build("bert_large", s), bert.MAX_POSITIONS),
    "bert_base_pretraining": (lambda s: bert.build("bert_base_pretraining", s), bert.MAX_POSITIONS),
    "bert_large_pretraining": (lambda s: bert.build("bert_large_pretraining", s), bert.MAX_POSITIONS),
    "gpt2": (lambda s: gpt2.build("gpt2", s), gpt2.MAX_POSITIONS),
    "gpt2_medium": (lambda s: gpt2.build("gpt2_medium", s), gpt2.MAX_POSITIONS),
    "gpt2_large": (lambda s: gpt2.build("gpt2_large", s), gpt2.MAX_POSITIONS),
    "gpt2_xl": (lambda s: gpt2.build("gpt2_xl", s), gpt2.MAX_POSITIONS),
    **{name: ((lambda s, name=name: decoder.build(name, GPT3[name], s)), GPT3_CONTEXT) for name in ("gpt3_1.3b", "gpt3_6.7b", "gpt3_13b")},
}

MODEL_NAMES: tuple[str, ...] = tuple(_BUILDERS)

_DEFAULT_SEQ_LEN = {
    "bert_base": bert.DEFAULT_SEQ_LEN,
    "bert_large": bert.DEFAULT_SEQ_LEN,
    "bert_base_pretraining": bert.DEFAULT_SEQ_LEN,
    "bert_large_pretraining": bert.DEFAULT_SEQ_LEN,
    "gpt2": gpt2.DEFAULT_SEQ_LEN,
    "gpt2_medium": gpt2.DEFAULT_SEQ_LEN,
    "gpt2_large": gpt2.DEFAULT_SEQ_LEN,
    "gpt2_xl": gpt2.DEFAULT_SEQ_LEN,
    **{name: GPT3_CONTEXT for name in GPT3},
}


def _check_name(name: str) -> None:
    if not isinstance(name, str) or name not in _BUILDERS:
        raise UnknownModelError(
            f"unknown model {name!r}; {closest(name, MODEL_NAMES, 'ssgd-sweep models')}")


def is_valid_name(name: object) -> bool:
    """Whether `name` can be a `model` value: a zoo name, "transformer", or a model file path."""
    return isinstance(name, str) and (name in _BUILDERS or name == TRANSFORMER or is_model_file(name))


def default_seq_len(name: str) -> int | None:
    """The sequence length used when none is given; None for CNNs."""
    if name == TRANSFORMER:
        return TRANSFORMER_DEFAULT_SEQ_LEN
    _check_name(name)
    return _DEFAULT_SEQ_LEN.get(name)


def model_of(values: Mapping) -> Model:
    """The model a configuration trains, from its canonical keys (`model`,
    `seq_len`, and for `model = "transformer"` the `transformer.*` keys):
    a structural group's keys or one configuration's point."""
    name = values["model"]
    if name != TRANSFORMER:
        return get_model(name, values.get("seq_len"))
    for key in TRANSFORMER_REQUIRED:
        if values.get(key) is None:
            raise SpecError(key, None, f'required with model = "{TRANSFORMER}"')
    seq_len = values.get("seq_len") or TRANSFORMER_DEFAULT_SEQ_LEN
    shape = DecoderShape(layers=values["transformer.layers"], hidden=values["transformer.hidden"],
                         heads=values["transformer.heads"], vocab=values.get("transformer.vocab") or gpt2.VOCAB_SIZE,
                         positions=seq_len, ffn=values.get("transformer.ffn"))
    return _transformer(shape, seq_len)


@functools.lru_cache(maxsize=64)
def _transformer(shape: DecoderShape, seq_len: int) -> Model:
    return decoder.build(TRANSFORMER, shape, seq_len)


@functools.lru_cache(maxsize=None)
def _build(name: str, seq_len: int | None) -> Model:
    builder, _ = _BUILDERS[name]
    return builder(seq_len)


def get_model(name: str, seq_len: int | None = None) -> Model:
    """The model called ``name``; ``seq_len`` matters for token models only.

    Equivalent requests (default vs explicit seq_len, any seq_len for a CNN)
    return the very same object. A path ending in .csv or .json is a model
    file (`sweep.graph.zoo.model_file`), read again when it changes.
    """
    if isinstance(name, str) and is_model_file(name):
        return load_model_file(name, seq_len)
    if name == TRANSFORMER:
        raise ValueError(f'model = "{TRANSFORMER}" is built from the transformer.* keys: use model_of')
    return _zoo_model(name, seq_len)


@functools.lru_cache(maxsize=None)
def _zoo_model(name: str, seq_len: int | None) -> Model:
    _check_name(name)
    _, max_positions = _BUILDERS[name]
    if max_positions is None:
        return _build(name, None)
    if seq_len is None:
        seq_len = _DEFAULT_SEQ_LEN[name]
    if (isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral)
            or not 1 <= seq_len <= max_positions):
        raise ValueError(
            f"seq_len={seq_len!r} is invalid for {name}: "
            f"must be an integer in 1..{max_positions}")
    return _build(name, int(seq_len))
