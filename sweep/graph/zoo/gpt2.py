"""GPT-2 decoders (Radford et al. 2019) as Hugging Face's GPT2Model, plus the
language-model head that training uses (`sweep.graph.zoo.decoder`).

Its gradient accumulates into ``wte``, whose gradient is therefore complete
only once the embedding's backward has run.
"""

from __future__ import annotations

from . import decoder
from .decoder import DecoderShape

VOCAB_SIZE = 50257
MAX_POSITIONS = 1024
DEFAULT_SEQ_LEN = MAX_POSITIONS

# Hugging Face configs (n_layer, n_embd, n_head).
SHAPES = {
    "gpt2": DecoderShape(layers=12, hidden=768, heads=12, vocab=VOCAB_SIZE, positions=MAX_POSITIONS),
    "gpt2_medium": DecoderShape(layers=24, hidden=1024, heads=16, vocab=VOCAB_SIZE, positions=MAX_POSITIONS),
    "gpt2_large": DecoderShape(layers=36, hidden=1280, heads=20, vocab=VOCAB_SIZE, positions=MAX_POSITIONS),
    "gpt2_xl": DecoderShape(layers=48, hidden=1600, heads=25, vocab=VOCAB_SIZE, positions=MAX_POSITIONS),
}


def build(name: str, seq_len: int):
    return decoder.build(name, SHAPES[name], seq_len)
