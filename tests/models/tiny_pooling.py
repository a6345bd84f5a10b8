"""Tiny random pooling checkpoints made in the test run, and HF transformers' outputs for
them (the reference): a decoder embedder saved without its LM head (`Qwen3Model`), a BERT
encoder and a BERT cross-encoder with a word-piece tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertTokenizer,
    Qwen3Config,
)

from tests.engine.tiny_models import VOCAB, save_tokenizer

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "what", "where", "runs", "big",
         "red", "house", "fast", "slow", "##s", "##ing", "and", "of"]
"""The word-piece tokenizer's words (BERT checkpoints), after its special tokens."""


def make_decoder_embedder(path: Path, seed: int = 0, **config: object) -> Path:
    """A random float32 Qwen3 decoder saved as `Qwen3Model` (weights without the "model."
    prefix, no LM head), with the word-level test tokenizer; `config`: extra config.json
    keys (e.g. is_matryoshka)."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=32, max_position_embeddings=512, **config)
    AutoModel.from_config(cfg, dtype=torch.float32).save_pretrained(path)
    save_tokenizer(path)
    return path


def _bert_config(**overrides: object) -> BertConfig:
    return BertConfig(**{"vocab_size": 5 + len(WORDS), "hidden_size": 48, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "intermediate_size": 96,
                         "max_position_embeddings": 64, "type_vocab_size": 2,
                         "initializer_range": 0.2, **overrides})


def _save_bert_tokenizer(path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    BertTokenizer(vocab={token: i for i, token in enumerate(vocab)}).save_pretrained(path)


def make_bert_embedder(path: Path, seed: int = 0) -> Path:
    """A random float32 BertModel with a word-piece tokenizer (no sentence-transformers
    files)."""
    torch.manual_seed(seed)
    AutoModel.from_config(_bert_config(), dtype=torch.float32).save_pretrained(path)
    _save_bert_tokenizer(path)
    return path


def make_cross_encoder(path: Path, seed: int = 0) -> Path:
    """A random float32 BertForSequenceClassification with one label (a reranker)."""
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(_bert_config(num_labels=1),
                                                          dtype=torch.float32)
    model.save_pretrained(path)
    _save_bert_tokenizer(path)
    return path


def write_sentence_transformers_files(path: Path, pooling: dict[str, object],
                                      normalize: bool = True,
                                      max_seq_length: int | None = None) -> None:
    """modules.json (Transformer, Pooling, Normalize if asked), the Pooling module's
    config.json and sentence_bert_config.json, as sentence-transformers saves them."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if max_seq_length is not None:
        (path / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": max_seq_length}))


@torch.inference_mode()
def hf_hidden_states(path: Path, prompts: list[list[int]],
                     token_types: list[list[int]] | None = None) -> list[torch.Tensor]:
    """HF's final hidden states [len, hidden] of each prompt, one at a time (AutoModel: the
    base model of the checkpoint's architecture)."""
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    outputs = []
    for i, prompt in enumerate(prompts):
        kwargs = {} if token_types is None else {"token_type_ids": torch.tensor([token_types[i]])}
        ids = torch.tensor([prompt])
        outputs.append(model(ids, attention_mask=torch.ones_like(ids), **kwargs)
                       .last_hidden_state[0])
    return outputs


def pooled(hidden: torch.Tensor, pooling: str, normalize: bool) -> torch.Tensor:
    """The reference pooling of one prompt's hidden states [len, hidden]."""
    vector = {"mean": hidden.mean(0), "cls": hidden[0], "last": hidden[-1]}[pooling]
    return F.normalize(vector, dim=-1) if normalize else vector


@torch.inference_mode()
def hf_cross_encoder_scores(path: Path, pairs: list[tuple[str, str]]) -> list[float]:
    """sigmoid(logit) of each pair, as sentence-transformers' CrossEncoder scores one."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    scores = []
    for a, b in pairs:
        logits = model(**tokenizer(a, b, return_tensors="pt")).logits
        scores.append(float(logits[0, 0].sigmoid()))
    return scores
