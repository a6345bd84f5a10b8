"""The real all-MiniLM-L6-v2 through `LLM.embed` and `LLM.score`: the same embeddings as
sentence-transformers (float32 on both sides: at most 1e-5 apart elementwise, cosine
similarity above 0.99999), for a batch of texts of very different lengths."""

from __future__ import annotations

import pytest
import torch

from pagoda import LLM
from tests.real_model.minilm import minilm_path, st_embeddings, st_token_counts

TEXTS = [
    "Hello!",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Embeddings turn text into vectors whose distances follow meaning. " * 12,
    "a",
]
MAX_ABS_DIFF = 1e-5
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def minilm():
    path = minilm_path()
    return path, LLM(str(path), dtype="float32", device="cpu")


def _check(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape == (len(want), 384)
    assert (got - want).abs().max() <= MAX_ABS_DIFF
    assert torch.nn.functional.cosine_similarity(got, want).min() >= MIN_COSINE


def test_embeddings_match_sentence_transformers(minilm):
    path, llm = minilm
    outputs = llm.embed(TEXTS, use_tqdm=False)
    assert [len(o.prompt_token_ids) for o in outputs] == st_token_counts(path, TEXTS)
    assert max(len(o.prompt_token_ids) for o in outputs) > 100  # lengths differ widely
    _check(torch.tensor([o.outputs.embedding for o in outputs]), st_embeddings(path, TEXTS))


def test_one_at_a_time_equals_the_batch(minilm):
    path, llm = minilm
    alone = torch.tensor([llm.embed(text, use_tqdm=False)[0].outputs.embedding
                          for text in TEXTS[:3]])
    _check(alone, st_embeddings(path, TEXTS[:3]))


def test_score_is_the_cosine_of_sentence_transformers_embeddings(minilm):
    path, llm = minilm
    scores = [s.outputs.score for s in llm.score(TEXTS[2], TEXTS[3:5], use_tqdm=False)]
    want = st_embeddings(path, TEXTS[2:5])
    expected = torch.nn.functional.cosine_similarity(want[:1], want[1:]).tolist()
    assert scores == pytest.approx(expected, abs=MAX_ABS_DIFF)
    assert scores[0] > scores[1]  # eating bread is closer to eating food than a baby is


def test_the_context_is_the_checkpoints_max_seq_length(minilm):
    _, llm = minilm
    assert llm.engine.max_model_len == 256  # sentence_bert_config.json, not the 512 positions
    with pytest.raises(ValueError, match="prompt is 300 tokens, longer than the model's "
                                         "context length"):
        llm.embed([[1000] * 300], use_tqdm=False)
