"""GPT-style decoders of any size: GPT-2 (Radford et al. 2019), GPT-3 (Brown
et al. 2020) and the parametric `model = "transformer"`.

Pre-LN blocks as Hugging Face's GPT2Model: LayerNorm, fused QKV projection,
attention, output projection; LayerNorm, GELU MLP of width `ffn`; a final
LayerNorm; learned position embeddings (one per position up to `positions`);
the LM head tied to the token embedding (its hidden -> vocab matmul is
listed as ``lm_head`` with params=0, like the attention scores).

Per block that is 12 h^2 + 13 h parameters with ffn = 4h (Q, K, V, output:
4 h^2 + 4 h; MLP: 8 h^2 + 5 h; two LayerNorms: 4 h), the "12 h^2 per block"
of Kaplan et al. 2020 (eq. 2.1) and Narayanan et al. 2021 (section 5.1), plus
(vocab + positions) h for the embeddings and 2 h for the final LayerNorm.
FLOPs per sequence: 2 per parameter per token in every matmul, plus 4 s^2 h
per block for the attention scores, plus 2 s h vocab for the LM head.
"""
from __future__ import annotations

import dataclasses

from . import layers as L
from .builder import LayerRecorder, TransformerConfig
from .model import Layer, Model

INPUT_TENSORS = 1  # input_ids only (int64)


@dataclasses.dataclass(frozen=True)
class DecoderShape:
    """One GPT-style decoder: depth, widths, vocabulary and position table."""
    layers: int
    hidden: int
    heads: int
    vocab: int
    positions: int  # rows of the learned position embedding
    ffn: int | None = None  # MLP width (None: 4 x hidden)

    @property
    def config(self) -> TransformerConfig:
        return TransformerConfig(hidden=self.hidden, num_layers=self.layers, heads=self.heads, ffn=self.ffn)

    def block_params(self) -> int:
        """Parameters of one block, in closed form: 4h^2 + 4h (attention) +
        2 h ffn + ffn + h (MLP) + 4h (two LayerNorms)."""
        h, f = self.hidden, self.config.intermediate
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h

    def params(self) -> int:
        """Parameters of the whole decoder, in closed form."""
        return self.layers * self.block_params() + (self.vocab + self.positions) * self.hidden + 2 * self.hidden


def decoder(shape: DecoderShape, seq_len: int) -> LayerRecorder:
    r = LayerRecorder()
    cfg, h, s = shape.config, shape.hidden, seq_len
    r.add(L.embedding("wte", shape.vocab, h, tokens=s))
    r.add(L.embedding("wpe", shape.positions, h, tokens=s))
    for i in range(cfg.num_layers):
        p = f"h.{i}"
        r.add(L.layernorm(f"{p}.ln_1", h, tokens=s))
        r.linear(f"{p}.attn.c_attn", h, 3 * h, tokens=s)  # Q, K and V in one matmul
        r.add(L.attention_scores(f"{p}.attn.scores", s, h, cfg.heads))
        r.linear(f"{p}.attn.c_proj", h, h, tokens=s)
        r.add(L.layernorm(f"{p}.ln_2", h, tokens=s))
        r.linear(f"{p}.mlp.c_fc", h, cfg.intermediate, tokens=s)
        r.linear(f"{p}.mlp.c_proj", cfg.intermediate, h, tokens=s)
    r.add(L.layernorm("ln_f", h, tokens=s))
    # Tied to wte: its weight is counted there, hence params=0.
    r.add(Layer("lm_head", 0, 2.0 * s * h * shape.vocab, L.ACTIVATION_BYTES * s * shape.vocab))
    return r


def build(name: str, shape: DecoderShape, seq_len: int) -> Model:
    return decoder(shape, seq_len).build(name, input_bytes=seq_len * 8 * INPUT_TENSORS, seq_len=seq_len)
