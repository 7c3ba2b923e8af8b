"""GPT-2 decoders (Radford et al. 2019) as Hugging Face's GPT2Model, plus the
language-model head that training uses.

Pre-LN blocks: LayerNorm, fused QKV projection, causal attention, output
projection; LayerNorm, 4x wide GELU MLP; a final LayerNorm. Names follow
Hugging Face's module paths.

The LM head shares its weight matrix with ``wte`` (tied), so it adds no
parameters, but its hidden -> vocab matmul is real work in every training
step; it is listed as ``lm_head`` with params=0, like the attention scores.
Its gradient accumulates into ``wte``, whose gradient is therefore complete
only once the embedding's backward has run.
"""

from __future__ import annotations

from . import layers as L
from .builder import LayerRecorder, TransformerConfig
from .model import Layer

VOCAB_SIZE = 50257
MAX_POSITIONS = 1024
INPUT_TENSORS = 1  # input_ids only (int64)
DEFAULT_SEQ_LEN = MAX_POSITIONS


CONFIGS = {
    "gpt2": TransformerConfig(hidden=768, num_layers=12),
    "gpt2_medium": TransformerConfig(hidden=1024, num_layers=24),
    "gpt2_large": TransformerConfig(hidden=1280, num_layers=36),
    "gpt2_xl": TransformerConfig(hidden=1600, num_layers=48),
}


def gpt2(cfg: TransformerConfig, seq_len: int) -> LayerRecorder:
    r = LayerRecorder()
    h, s = cfg.hidden, seq_len
    r.add(L.embedding("wte", VOCAB_SIZE, h))
    r.add(L.embedding("wpe", MAX_POSITIONS, h))
    for i in range(cfg.num_layers):
        p = f"h.{i}"
        r.add(L.layernorm(f"{p}.ln_1", h, tokens=s))
        r.linear(f"{p}.attn.c_attn", h, 3 * h, tokens=s)  # Q, K and V in one matmul
        r.add(L.attention_scores(f"{p}.attn.scores", s, h))
        r.linear(f"{p}.attn.c_proj", h, h, tokens=s)
        r.add(L.layernorm(f"{p}.ln_2", h, tokens=s))
        r.linear(f"{p}.mlp.c_fc", h, cfg.intermediate, tokens=s)
        r.linear(f"{p}.mlp.c_proj", cfg.intermediate, h, tokens=s)
    r.add(L.layernorm("ln_f", h, tokens=s))
    # Tied to wte: its weight is counted there, hence params=0.
    r.add(Layer("lm_head", 0, 2.0 * s * h * VOCAB_SIZE))
    return r


def build(name: str, seq_len: int):
    return gpt2(CONFIGS[name], seq_len).build(
        name, input_bytes=seq_len * 8 * INPUT_TENSORS, seq_len=seq_len)
