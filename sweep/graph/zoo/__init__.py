"""Model zoo: per-layer parameter and FLOP counts of the networks the sweep trains.

Each model is built from its layer-level architecture (channels, kernels,
strides and spatial shapes flowing through; hidden sizes and sequence length
for transformers), never from hard-coded totals.

Conventions
-----------
* One :class:`Layer` per module that holds parameters, as PyTorch structures
  them: each Conv2d, BatchNorm2d, Linear, Embedding and LayerNorm is its own
  layer, named by its module path in torchvision / Hugging Face. Parameter-free
  operations (activations, pooling, residual adds, softmax, dropout) are not
  layers. Exception: the attention score matmuls (Q K^T and weights x V) form a
  ``...scores`` layer with params=0 between the Q/K/V projections and the
  output projection, because they cost real FLOPs; likewise GPT-2's tied LM
  head is a ``lm_head`` layer with params=0 (its weight is ``wte``).
* ``layers`` are in forward execution order (auxiliary heads where they branch
  off in the forward pass).
* ``params`` counts trainable parameters only (BatchNorm running statistics are
  buffers, not parameters). Totals equal torchvision / Hugging Face exactly.
* ``forward_flops`` is per sample (per sequence for token models): 2 FLOPs per
  multiply-accumulate for convolutions (grouped too), linear layers and
  attention matmuls; 2 FLOPs per output element for BatchNorm and LayerNorm
  (scale and shift, inference-style); 0 for embedding look-ups. Bias adds,
  activations, pooling and softmax are ignored.
* Auxiliary classifiers are included, parameters and FLOPs alike, because they
  are trained and send gradients: GoogLeNet's aux1/aux2 (torchvision
  ``aux_logits=True``, 13,004,888 params in all) and Inception v3's AuxLogits
  (27,161,264 params in all).
* ``output_bytes`` is each layer's output per sample in float32: the
  activations training keeps for the backward pass (attention scores: the
  weights, heads x seq_len^2, and the weighted values).
* GPT-3 sizes (``gpt3_1.3b``, ``gpt3_6.7b``, ``gpt3_13b``) and the
  parametric ``model = "transformer"`` are GPT-2-style decoders
  (`decoder`); a user's own model comes from a file (`model_file`).
* Inputs: CNNs take 224x224 RGB images (Inception v3 299x299), 1000 classes;
  ``input_bytes`` is 3*H*W*4 (float32). BERT is fed three int64 tensors
  (ids, attention mask, token types), GPT-2 one (ids): seq_len*8 bytes each.
  BERT is BertModel with pooler (no pre-training heads); GPT-2 is GPT2Model
  plus the tied LM head.
"""

from .model import Layer, Model
from .model_file import is_model_file
from .registry import (MODEL_NAMES, TRANSFORMER, TRANSFORMER_KEYS, UnknownModelError, default_seq_len, get_model,
                       is_valid_name, model_of)

__all__ = [
    "Layer",
    "Model",
    "MODEL_NAMES",
    "TRANSFORMER",
    "TRANSFORMER_KEYS",
    "UnknownModelError",
    "default_seq_len",
    "get_model",
    "is_model_file",
    "is_valid_name",
    "model_of",
]
