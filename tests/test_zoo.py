"""Tests of sweep.graph.zoo against independently published reference numbers.

Parameter totals: torchvision (sum of p.numel() over model.parameters(),
weights=None; GoogLeNet with aux_logits=True, Inception v3 with AuxLogits) and
Hugging Face transformers (BertModel with pooler; GPT2Model, whose LM head is
tied to wte and adds no parameters).
MAC totals: the GFLOPS column of torchvision's model docs, which counts
conv + linear multiply-accumulates (without the aux heads).
"""

from __future__ import annotations

import dataclasses

import pytest

from sweep.graph.zoo import (MODEL_NAMES, Layer, Model, UnknownModelError,
                       default_seq_len, get_model)

CNNS = ("alexnet", "googlenet", "inception_v3", "resnet50", "resnet101",
        "resnet152", "vgg16")
BERTS = ("bert_base", "bert_large")
BERT_PRETRAINING = ("bert_base_pretraining", "bert_large_pretraining")
GPT2S = ("gpt2", "gpt2_medium", "gpt2_large", "gpt2_xl")
GPT3S = ("gpt3_1.3b", "gpt3_6.7b", "gpt3_13b")

# torchvision and Hugging Face parameter counts.
PUBLISHED_PARAMS = {
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "googlenet": 13_004_888,  # 6,624,904 without aux1/aux2
    "inception_v3": 27_161_264,  # 23,834,568 without AuxLogits
    "bert_base": 109_482_240,
    "bert_large": 335_141_888,
    # BertForPreTraining (decoder weight tied to the word embeddings).
    "bert_base_pretraining": 110_106_428,
    "bert_large_pretraining": 336_226_108,
    "gpt2": 124_439_808,
    "gpt2_medium": 354_823_168,
    "gpt2_large": 774_030_080,
    "gpt2_xl": 1_557_611_200,
    # GPT-3 (Brown et al. 2020, Table 2.1) gives rounded totals: 1.3B, 6.7B, 13.0B;
    # these are the closed form of sweep.graph.zoo.decoder, checked against them below.
    "gpt3_1.3b": 1_315_723_264,
    "gpt3_6.7b": 6_658_404_352,
    "gpt3_13b": 12_952_938_780,
}

# torchvision docs, GMACs (conv + linear) per 224x224 (299x299) image.
PUBLISHED_GMACS = {
    "alexnet": 0.71,
    "vgg16": 15.47,
    "resnet50": 4.09,
    "resnet101": 7.80,
    "resnet152": 11.51,
    "googlenet": 1.50,
    "inception_v3": 5.71,
}

# (hidden, layers, vocab, max positions) from the Hugging Face configs.
TRANSFORMER_SHAPES = {
    "bert_base": (768, 12, 30522, 512),
    "bert_large": (1024, 24, 30522, 512),
    "gpt2": (768, 12, 50257, 1024),
    "gpt2_medium": (1024, 24, 50257, 1024),
    "gpt2_large": (1280, 36, 50257, 1024),
    "gpt2_xl": (1600, 48, 50257, 1024),
    "gpt3_1.3b": (2048, 24, 50257, 2048),
    "gpt3_6.7b": (4096, 32, 50257, 2048),
    "gpt3_13b": (5140, 40, 50257, 2048),
}

# Number of torchvision modules that own parameters directly (conv, bn,
# linear), counting aux heads for googlenet / inception_v3.
TORCHVISION_PARAM_MODULES = {
    "alexnet": 8, "vgg16": 16, "resnet50": 107, "resnet101": 209,
    "resnet152": 311, "googlenet": 123, "inception_v3": 194,
}


def _is_norm(layer: Layer) -> bool:
    leaf = layer.name.rsplit(".", 1)[-1]
    return (leaf.startswith(("bn", "ln")) or leaf == "LayerNorm"
            or layer.name.endswith("downsample.1"))


def _is_aux(layer: Layer) -> bool:
    return layer.name.startswith(("aux1.", "aux2.", "AuxLogits."))


def test_model_names_exact():
    assert MODEL_NAMES == ("alexnet", "googlenet", "inception_v3", "resnet50",
                           "resnet101", "resnet152", "vgg16", "bert_base",
                           "bert_large", "bert_base_pretraining", "bert_large_pretraining", "gpt2", "gpt2_medium", "gpt2_large",
                           "gpt2_xl", "gpt3_1.3b", "gpt3_6.7b", "gpt3_13b")


@pytest.mark.parametrize("name, published", [("gpt3_1.3b", 1.3e9), ("gpt3_6.7b", 6.7e9), ("gpt3_13b", 13.0e9)])
def test_gpt3_sizes_round_to_the_papers_table(name, published):
    # Brown et al. 2020, Table 2.1, to the digits it prints.
    assert round(get_model(name).params / 1e8) / 10 == published / 1e9
    hidden, layers, vocab, positions = TRANSFORMER_SHAPES[name]
    # 12 h^2 + 13 h per block, (vocab + positions) h embeddings, 2 h final LayerNorm.
    assert get_model(name).params == layers * (12 * hidden**2 + 13 * hidden) + (vocab + positions) * hidden + 2 * hidden


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_param_total_matches_reference_exactly(name):
    model = get_model(name)
    assert model.params == PUBLISHED_PARAMS[name]
    assert model.params == sum(layer.params for layer in model.layers)
    assert model.name == name


@pytest.mark.parametrize("name", CNNS)
def test_cnn_macs_close_to_torchvision(name):
    layers = [l for l in get_model(name).layers if not _is_norm(l) and not _is_aux(l)]
    gmacs = sum(l.forward_flops for l in layers) / 2e9
    assert gmacs == pytest.approx(PUBLISHED_GMACS[name], rel=0.03)


def test_aux_heads_are_counted():
    aux_params = {"googlenet": 13_004_888 - 6_624_904,
                  "inception_v3": 27_161_264 - 23_834_568}
    for name, expected in aux_params.items():
        aux = [l for l in get_model(name).layers if _is_aux(l)]
        assert sum(l.params for l in aux) == expected
        assert sum(l.forward_flops for l in aux) > 0


@pytest.mark.parametrize("name", CNNS)
def test_cnn_layer_count_and_norm_flops(name):
    model = get_model(name)
    assert len(model.layers) == TORCHVISION_PARAM_MODULES[name]
    assert all(l.params % 2 == 0 for l in model.layers if _is_norm(l))


def test_cnn_stem_layer_values():
    # ResNet stem: 7x7/2 conv 3->64 on 224x224 gives 64x112x112.
    layers = {l.name: l for l in get_model("resnet50").layers}
    assert layers["conv1"] == Layer("conv1", 64 * 3 * 49, 2.0 * 64 * 112 * 112 * 3 * 49, 4 * 64 * 112 * 112)
    # BatchNorm: scale + shift per channel; 2 FLOPs per output element.
    assert layers["bn1"] == Layer("bn1", 2 * 64, 2.0 * 64 * 112 * 112, 4 * 64 * 112 * 112)
    assert layers["fc"].forward_flops == 2.0 * 2048 * 1000
    # Inception v3 stem: 3x3/2 conv on 299x299 gives 149x149.
    iv3 = {l.name: l for l in get_model("inception_v3").layers}
    assert iv3["Conv2d_1a_3x3.bn"].forward_flops == 2.0 * 32 * 149 * 149


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_layers_well_formed(name):
    model = get_model(name)
    names = [l.name for l in model.layers]
    assert len(set(names)) == len(names)
    assert all(isinstance(l, Layer) for l in model.layers)
    assert isinstance(model.layers, tuple)
    assert all(l.params >= 0 and l.forward_flops >= 0 for l in model.layers)
    assert all(isinstance(l.params, int) for l in model.layers)
    assert model.forward_flops == pytest.approx(sum(l.forward_flops for l in model.layers))
    assert 5 <= len(model.layers) <= 400


@pytest.mark.parametrize("name", BERTS + GPT2S + GPT3S)
def test_transformer_flops_per_token(name):
    # Per token: 2 FLOPs per non-embedding weight, plus 4*S*H per block for
    # the two attention matmuls; norms and biases add < 1%.
    hidden, n_layers, vocab, max_pos = TRANSFORMER_SHAPES[name]
    model = get_model(name)
    s = model.seq_len
    body = [l for l in model.layers if l.name not in ("lm_head", "pooler.dense")]
    embedding = hidden * (vocab + max_pos + (2 if name in BERTS else 0))
    pooler = hidden * hidden + hidden if name in BERTS else 0
    non_embedding = PUBLISHED_PARAMS[name] - embedding - pooler
    expected = 2 * non_embedding + 4 * n_layers * s * hidden
    assert sum(l.forward_flops for l in body) / s == pytest.approx(expected, rel=0.01)
    assert len(model.layers) == (5 + 9 * n_layers if name in BERTS else 4 + 7 * n_layers)


@pytest.mark.parametrize("name", BERT_PRETRAINING)
def test_bert_pretraining_heads_on_the_encoder(name):
    """BertForPreTraining = BertModel, then the masked-LM head on every token
    (transform dense h x h + LayerNorm, decoder onto the vocabulary with its
    weight tied to the word embeddings: the bias alone is new) and the
    next-sentence classifier (h x 2) on the pooled token."""
    encoder = get_model(name.removesuffix("_pretraining"), 64)
    model = get_model(name, 64)
    hidden, _, vocab, _ = TRANSFORMER_SHAPES[name.removesuffix("_pretraining")]
    assert model.layers[:len(encoder.layers)] == encoder.layers
    heads = {l.name: l for l in model.layers[len(encoder.layers):]}
    assert list(heads) == ["cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                           "cls.predictions.decoder", "cls.seq_relationship"]
    assert heads["cls.predictions.decoder"].params == vocab
    assert heads["cls.predictions.decoder"].forward_flops == 2 * 64 * hidden * vocab
    assert heads["cls.seq_relationship"].forward_flops == 2 * hidden * 2
    assert model.params - encoder.params == (hidden * hidden + hidden) + 2 * hidden + vocab + (2 * hidden + 2)
    assert model.seq_len == encoder.seq_len == 64


@pytest.mark.parametrize("name", GPT2S + GPT3S)
def test_gpt2_tied_lm_head(name):
    hidden, _, vocab, _ = TRANSFORMER_SHAPES[name]
    model = get_model(name)
    head = model.layers[-1]
    assert head.name == "lm_head" and head.params == 0
    assert head.forward_flops == 2 * model.seq_len * hidden * vocab
    wte = model.layers[0]
    assert wte.name == "wte" and wte.params == vocab * hidden
    assert wte.forward_flops == 0


def test_attention_scores_layer_placement():
    bert = [l.name for l in get_model("bert_base").layers]
    i = bert.index("encoder.layer.3.attention.self.scores")
    assert bert[i - 1] == "encoder.layer.3.attention.self.value"
    assert bert[i + 1] == "encoder.layer.3.attention.output.dense"
    gpt = [l.name for l in get_model("gpt2").layers]
    i = gpt.index("h.5.attn.scores")
    assert gpt[i - 1] == "h.5.attn.c_attn" and gpt[i + 1] == "h.5.attn.c_proj"
    for name in BERTS + GPT2S:
        scores = [l for l in get_model(name).layers if l.name.endswith(".scores")]
        assert len(scores) == TRANSFORMER_SHAPES[name][1]
        assert all(l.params == 0 and l.forward_flops > 0 for l in scores)


def test_forward_order_endpoints():
    r50 = get_model("resnet50").layers
    assert [l.name for l in r50[:2]] == ["conv1", "bn1"]
    assert r50[-1].name == "fc" and r50[-1].params == 2048 * 1000 + 1000
    # The aux heads sit where they branch off in the forward pass.
    g = [l.name for l in get_model("googlenet").layers]
    assert g.index("inception4a.branch4.1.bn") < g.index("aux1.conv.conv") < g.index("inception4b.branch1.conv")
    iv3 = [l.name for l in get_model("inception_v3").layers]
    assert iv3.index("Mixed_6e.branch_pool.bn") < iv3.index("AuxLogits.fc") < iv3.index("Mixed_7a.branch3x3_1.conv")
    assert get_model("bert_base").layers[-1].name == "pooler.dense"
    assert get_model("bert_base").layers[0].name == "embeddings.word_embeddings"


def test_input_bytes():
    assert get_model("resnet50").input_bytes == 3 * 224 * 224 * 4
    assert get_model("inception_v3").input_bytes == 3 * 299 * 299 * 4
    assert get_model("bert_base").input_bytes == 128 * 8 * 3
    assert get_model("bert_large", 384).input_bytes == 384 * 8 * 3
    assert get_model("gpt2").input_bytes == 1024 * 8
    assert get_model("gpt2_xl", 100).input_bytes == 100 * 8


def test_seq_len_scaling():
    short, long = get_model("bert_base", 64), get_model("bert_base", 512)
    assert short.params == long.params
    assert long.forward_flops > 8 * short.forward_flops  # attention is quadratic
    assert (short.seq_len, long.seq_len) == (64, 512)
    g1, g2 = get_model("gpt2", 512), get_model("gpt2", 1024)
    assert g1.params == g2.params and g2.forward_flops > 2 * g1.forward_flops
    assert [l.name for l in g1.layers] == [l.name for l in g2.layers]


def test_defaults_and_caching():
    for name in CNNS:
        assert default_seq_len(name) is None
        assert get_model(name).seq_len is None
    assert default_seq_len("bert_base") == default_seq_len("bert_large") == 128
    assert all(default_seq_len(n) == 1024 for n in GPT2S)
    assert get_model("bert_base") is get_model("bert_base")
    assert get_model("bert_base") is get_model("bert_base", 128)
    assert get_model("bert_base").seq_len == 128
    assert get_model("gpt2", 1024) is get_model("gpt2")
    assert get_model("bert_base", 256) is not get_model("bert_base")
    # CNNs ignore seq_len.
    assert get_model("resnet50", 77) is get_model("resnet50")


def test_models_are_frozen():
    model = get_model("alexnet")
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.name = "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.layers[0].params = 0
    assert isinstance(model, Model)


@pytest.mark.parametrize("bad,hint", [("resnet", "did you mean resnet50?"), ("ResNet50", "did you mean resnet50?"),
                                      ("bert", "did you mean bert_base?"), ("", "see ssgd-sweep models"),
                                      ("gpt2-xl", "did you mean gpt2_xl?")])
def test_unknown_model(bad, hint):
    """The nearest zoo name when there is one, else where the names are listed."""
    for fn in (get_model, default_seq_len):
        with pytest.raises(UnknownModelError) as info:
            fn(bad)
        assert repr(bad) in str(info.value) and str(info.value).endswith(hint)
    assert issubclass(UnknownModelError, ValueError)


@pytest.mark.parametrize("name,seq_len", [
    ("bert_base", 0), ("bert_base", -3), ("bert_base", 513), ("bert_large", 1000),
    ("gpt2", 1025), ("gpt2_xl", 0), ("gpt2", 1.5), ("bert_base", True),
])
def test_bad_seq_len(name, seq_len):
    with pytest.raises(ValueError) as info:
        get_model(name, seq_len)
    assert not isinstance(info.value, UnknownModelError)
    assert "seq_len" in str(info.value) and repr(seq_len) in str(info.value)


def test_seq_len_limits_accepted():
    assert get_model("bert_base", 512).seq_len == 512
    assert get_model("gpt2", 1).seq_len == 1
    assert get_model("bert_large", 1).params == PUBLISHED_PARAMS["bert_large"]


def test_layer_helpers_shapes():
    from sweep.graph.zoo.layers import FeatureMap, conv2d, pool2d
    # PyTorch MaxPool2d(2, 2, padding=1, ceil_mode=True) maps 5x5 to 3x3: a
    # window that would start in the right padding is dropped.
    assert pool2d(FeatureMap(1, 5, 5), 2, 2, 1, ceil_mode=True) == FeatureMap(1, 3, 3)
    assert pool2d(FeatureMap(1, 112, 112), 3, 2, ceil_mode=True) == FeatureMap(1, 56, 56)
    assert pool2d(FeatureMap(1, 112, 112), 3, 2) == FeatureMap(1, 55, 55)
    # Depthwise 3x3 conv: one 3x3 filter per channel.
    layer, out = conv2d("dw", FeatureMap(32, 56, 56), 32, 3, 1, 1, groups=32)
    assert out == FeatureMap(32, 56, 56)
    assert layer.params == 32 * 9 + 32
    assert layer.forward_flops == 2.0 * 56 * 56 * 32 * 9
    # Asymmetric kernels (Inception v3's 1x7 / 7x1).
    _, out = conv2d("a", FeatureMap(8, 17, 17), 8, (1, 7), padding=(0, 3))
    assert out == FeatureMap(8, 17, 17)
