"""BERT encoders (Devlin et al. 2019) as Hugging Face's BertModel, with pooler,
and with its pre-training heads as BertForPreTraining.

Post-LN blocks: self-attention, dense, residual + LayerNorm, then a 4x wide
GELU MLP, residual + LayerNorm. Names follow Hugging Face's module paths.
`bert_*_pretraining` adds what BertForPreTraining trains on top: the masked
LM head (a dense transform and LayerNorm on every token, then the decoder
onto the vocabulary, whose weight is tied to the word embeddings, so only
its bias is counted there) and the next-sentence head on the pooled token.
The decoder's matmul, 2 s h vocab FLOPs per sequence, is about a fifth of
BERT-Base's forward (21 % at 64 tokens, 20 % at 512): it runs first in
backward and makes no large gradient, where the tied weight's gradient is
ready only with the embeddings, at the end.
"""

from __future__ import annotations

from . import layers as L
from .builder import LayerRecorder, TransformerConfig
from .model import Layer

VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2  # segment A / segment B
INPUT_TENSORS = 3  # input_ids, attention_mask, token_type_ids, each int64
DEFAULT_SEQ_LEN = 128
PRETRAINING = "_pretraining"  # name suffix: BertForPreTraining's heads on top


CONFIGS = {
    "bert_base": TransformerConfig(hidden=768, num_layers=12, heads=12),
    "bert_large": TransformerConfig(hidden=1024, num_layers=24, heads=16),
}


def bert(cfg: TransformerConfig, seq_len: int) -> LayerRecorder:
    r = LayerRecorder()
    h, s = cfg.hidden, seq_len
    r.add(L.embedding("embeddings.word_embeddings", VOCAB_SIZE, h, tokens=s))
    # Hugging Face adds token-type embeddings before position embeddings.
    r.add(L.embedding("embeddings.token_type_embeddings", TYPE_VOCAB_SIZE, h, tokens=s))
    r.add(L.embedding("embeddings.position_embeddings", MAX_POSITIONS, h, tokens=s))
    r.add(L.layernorm("embeddings.LayerNorm", h, tokens=s))
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            r.linear(f"{p}.attention.self.{proj}", h, h, tokens=s)
        r.add(L.attention_scores(f"{p}.attention.self.scores", s, h, cfg.heads))
        r.linear(f"{p}.attention.output.dense", h, h, tokens=s)
        r.add(L.layernorm(f"{p}.attention.output.LayerNorm", h, tokens=s))
        r.linear(f"{p}.intermediate.dense", h, cfg.intermediate, tokens=s)
        r.linear(f"{p}.output.dense", cfg.intermediate, h, tokens=s)
        r.add(L.layernorm(f"{p}.output.LayerNorm", h, tokens=s))
    # The pooler only transforms the first ([CLS]) token.
    r.linear("pooler.dense", h, h, tokens=1)
    return r


def pretraining_heads(r: LayerRecorder, cfg: TransformerConfig, seq_len: int) -> LayerRecorder:
    """BertForPreTraining's heads after `bert`: the masked LM head on every
    token (decoder weight tied to the word embeddings: its bias alone is
    counted here) and the next-sentence classifier on the pooled token."""
    h, s = cfg.hidden, seq_len
    r.linear("cls.predictions.transform.dense", h, h, tokens=s)
    r.add(L.layernorm("cls.predictions.transform.LayerNorm", h, tokens=s))
    r.add(Layer("cls.predictions.decoder", VOCAB_SIZE, 2.0 * s * h * VOCAB_SIZE, L.ACTIVATION_BYTES * s * VOCAB_SIZE))
    r.linear("cls.seq_relationship", h, 2, tokens=1)
    return r


def build(name: str, seq_len: int):
    pretraining = name.endswith(PRETRAINING)
    cfg = CONFIGS[name.removesuffix(PRETRAINING)]
    recorder = bert(cfg, seq_len)
    if pretraining:
        recorder = pretraining_heads(recorder, cfg, seq_len)
    return recorder.build(name, input_bytes=seq_len * 8 * INPUT_TENSORS, seq_len=seq_len)
