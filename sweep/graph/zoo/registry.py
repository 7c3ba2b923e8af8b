"""Model names, their default sequence lengths, and the cached look-up."""

from __future__ import annotations

import functools
import numbers
from typing import Callable

from . import alexnet, bert, googlenet, gpt2, inception, resnet, vgg
from .model import Model
from sweep.errors import closest


class UnknownModelError(ValueError):
    """Raised for a model name that is not in :data:`MODEL_NAMES`."""


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
    "gpt2": (lambda s: gpt2.build("gpt2", s), gpt2.MAX_POSITIONS),
    "gpt2_medium": (lambda s: gpt2.build("gpt2_medium", s), gpt2.MAX_POSITIONS),
    "gpt2_large": (lambda s: gpt2.build("gpt2_large", s), gpt2.MAX_POSITIONS),
    "gpt2_xl": (lambda s: gpt2.build("gpt2_xl", s), gpt2.MAX_POSITIONS),
}

MODEL_NAMES: tuple[str, ...] = tuple(_BUILDERS)

_DEFAULT_SEQ_LEN = {
    "bert_base": bert.DEFAULT_SEQ_LEN,
    "bert_large": bert.DEFAULT_SEQ_LEN,
    "gpt2": gpt2.DEFAULT_SEQ_LEN,
    "gpt2_medium": gpt2.DEFAULT_SEQ_LEN,
    "gpt2_large": gpt2.DEFAULT_SEQ_LEN,
    "gpt2_xl": gpt2.DEFAULT_SEQ_LEN,
}


def _check_name(name: str) -> None:
    if not isinstance(name, str) or name not in _BUILDERS:
        raise UnknownModelError(
            f"unknown model {name!r}; {closest(name, MODEL_NAMES, 'ssgd-sweep models')}")


def default_seq_len(name: str) -> int | None:
    """The sequence length used when none is given; None for CNNs."""
    _check_name(name)
    return _DEFAULT_SEQ_LEN.get(name)


@functools.lru_cache(maxsize=None)
def _build(name: str, seq_len: int | None) -> Model:
    builder, _ = _BUILDERS[name]
    return builder(seq_len)


@functools.lru_cache(maxsize=None)
def get_model(name: str, seq_len: int | None = None) -> Model:
    """The model called ``name``; ``seq_len`` matters for token models only.

    Equivalent requests (default vs explicit seq_len, any seq_len for a CNN)
    return the very same object.
    """
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
