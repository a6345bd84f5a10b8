"""What a pooling model outputs, resolved from the user's options, the checkpoint's
sentence-transformers files and the model's defaults; what it refuses, by name."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pagoda.config import PoolerConfig
from pagoda.pooling import (
    PoolerSpec,
    SentenceTransformersConfig,
    read_sentence_transformers_config,
    resolve_pooler_spec,
)
from pagoda.pooling_params import PoolingParams
from tests.models.tiny_pooling import write_sentence_transformers_files

LEGACY_MEAN = {"word_embedding_dimension": 8, "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False}


@pytest.mark.parametrize(("pooling", "expected"), [
    (LEGACY_MEAN, "mean"),
    ({"pooling_mode_cls_token": True}, "cls"),
    ({"pooling_mode_lasttoken": True}, "last"),
    ({"embedding_dimension": 8, "pooling_mode": "lasttoken", "include_prompt": True}, "last"),
])
def test_pooling_modes_are_read(tmp_path, pooling, expected):
    write_sentence_transformers_files(tmp_path, pooling, normalize=False, max_seq_length=128)
    assert read_sentence_transformers_config(tmp_path) == SentenceTransformersConfig(
        expected, False, 128)


@pytest.mark.parametrize(("pooling", "problem"), [
    ({"pooling_mode_max_tokens": True}, "pooling mode 'max' is not supported"),
    ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True},
     r"pooling mode \['cls', 'mean'\] is not supported"),
    ({"pooling_mode": "weightedmean"}, "pooling mode 'weightedmean' is not supported"),
    ({"pooling_mode": "mean", "include_prompt": False}, "include_prompt false"),
])
def test_unsupported_pooling_is_refused_naming_the_file(tmp_path, pooling, problem):
    write_sentence_transformers_files(tmp_path, pooling)
    with pytest.raises(ValueError, match=f"1_Pooling/config.json: {problem}"):
        read_sentence_transformers_config(tmp_path)


def test_an_unsupported_module_is_refused(tmp_path):
    write_sentence_transformers_files(tmp_path, LEGACY_MEAN)
    modules = json.loads((tmp_path / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense",
                    "type": "sentence_transformers.models.Dense"})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="module 'sentence_transformers.models.Dense' is not "
                                         "supported"):
        read_sentence_transformers_config(tmp_path)


def test_a_checkpoint_without_modules_json_has_no_config(tmp_path):
    assert read_sentence_transformers_config(tmp_path) is None


HF = SimpleNamespace(hidden_size=64)
ST = SentenceTransformersConfig("mean", True, None)


@pytest.mark.parametrize(("config", "checkpoint", "expected"), [
    (PoolerConfig(), None, ("last", True)),  # the model's defaults
    (PoolerConfig(), ST, ("mean", True)),  # the checkpoint's
    (PoolerConfig(pooling="cls", normalize_embeddings=False), ST, ("cls", False)),  # the user's
])
def test_precedence(config, checkpoint, expected):
    spec = resolve_pooler_spec("embed", "last", True, config, checkpoint, HF)
    assert (spec.pooling, spec.normalize, spec.size, spec.matryoshka) == (*expected, 64, False)


def test_matryoshka_dimensions_from_the_config():
    hf = SimpleNamespace(hidden_size=64, matryoshka_dimensions=[32, 16, 64])
    spec = resolve_pooler_spec("embed", "last", True, PoolerConfig(), None, hf)
    assert spec.matryoshka and spec.matryoshka_dimensions == (16, 32, 64)
    spec.check(PoolingParams(dimensions=32))
    with pytest.raises(ValueError, match="dimensions must be one of 16, 32, 64 for this model, "
                                         "got 8"):
        spec.check(PoolingParams(dimensions=8))


@pytest.mark.parametrize(("saved", "activation"), [
    (None, "sigmoid"),
    ({"activation_fn": "torch.nn.modules.linear.Identity"}, "identity"),
    ({"activation_fn": "torch.nn.modules.activation.Sigmoid"}, "sigmoid"),
])
def test_cross_encoder_activation(saved, activation):
    hf = SimpleNamespace(hidden_size=64, num_labels=1, sentence_transformers=saved)
    spec = resolve_pooler_spec("score", "cls", False, PoolerConfig(), None, hf)
    assert spec == PoolerSpec("score", "cls", False, 1, activation=activation)


def test_cross_encoder_refusals():
    base = {"hidden_size": 64, "num_labels": 1}
    with pytest.raises(ValueError, match="activation_fn 'torch.nn.modules.activation.Tanh' is "
                                         "not supported"):
        resolve_pooler_spec("score", "cls", False, PoolerConfig(), None, SimpleNamespace(
            **base, sentence_transformers={"activation_fn": "torch.nn.modules.activation.Tanh"}))
    with pytest.raises(ValueError, match="num_labels is 3: only cross-encoders with one label"):
        resolve_pooler_spec("score", "cls", False, PoolerConfig(), None,
                            SimpleNamespace(**{**base, "num_labels": 3}))
    with pytest.raises(ValueError, match="pooling does not apply to a cross-encoder"):
        resolve_pooler_spec("score", "cls", False, PoolerConfig(pooling="mean"), None,
                            SimpleNamespace(**base))


def test_pooling_params_are_checked():
    with pytest.raises(ValueError, match="dimensions must be an integer >= 1, got 0"):
        PoolingParams(dimensions=0)
    with pytest.raises(ValueError, match="task must be one of embed, score"):
        PoolingParams(task="classify")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimensions applies to embeddings only"):
        PoolingParams(task="score", dimensions=4)
