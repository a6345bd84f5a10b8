"""Pooling models through `LLM`: embeddings and scores equal HF transformers' (float32) for
a decoder embedder (last token), a BERT encoder and a BERT cross-encoder, across batches,
chunked prefill, prefix caching, preemption and overlapped steps; and the runner and
pooler options, with their errors."""

from __future__ import annotations

import random

import pytest
import torch

from pagoda import LLM, PoolingParams
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs
from tests.models.tiny_pooling import (
    hf_cross_encoder_scores,
    hf_hidden_states,
    make_bert_embedder,
    make_cross_encoder,
    make_decoder_embedder,
    pooled,
    write_sentence_transformers_files,
)

ATOL = 1e-5
"""float32 on both sides: only the summation order differs."""

rng = random.Random(11)
PREFIX = [rng.randrange(3, VOCAB) for _ in range(21)]
PROMPTS = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 17, 9, 30, 1, 12)]
SHARED = [PREFIX + [5], PREFIX + [6, 7], PREFIX + [5]]
"""A shared prefix with different last tokens, and one prompt twice."""


def _embed(llm: LLM, prompts: list[list[int]], **params: object) -> torch.Tensor:
    outputs = llm.embed([{"prompt_token_ids": p} for p in prompts], PoolingParams(**params),
                        use_tqdm=False)
    return torch.tensor([o.outputs.embedding for o in outputs])


def _expected(path, prompts: list[list[int]], pooling: str = "last",
              normalize: bool = True) -> torch.Tensor:
    return torch.stack([pooled(h, pooling, normalize) for h in hf_hidden_states(path, prompts)])


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    assert (got - want).abs().max() <= ATOL, (got - want).abs().max()


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return make_decoder_embedder(tmp_path_factory.mktemp("qwen3-embedder"))


@pytest.mark.parametrize("options", [
    {},
    {"max_num_batched_tokens": 8, "block_size": 4},  # chunked prefill
    {"num_kv_blocks": 12, "block_size": 4},  # prompts wait for blocks
    {"async_scheduling": True, "max_num_batched_tokens": 8, "block_size": 4},
    {"max_num_seqs": 2},
])
def test_decoder_last_token_embeddings_match_hf(decoder, options):
    llm = LLM(str(decoder), dtype="float32", device="cpu", **{"num_kv_blocks": 256} | options)
    assert llm.engine.pooler is not None and llm.engine.pooler.pooling == "last"
    _close(_embed(llm, PROMPTS), _expected(decoder, PROMPTS))
    assert llm.engine.core.stats().kv_cache_usage == 0.0


def test_prefix_cache_hits_keep_each_requests_own_output(decoder):
    llm = LLM(str(decoder), dtype="float32", device="cpu", num_kv_blocks=64, block_size=4)
    want = _expected(decoder, SHARED)
    _close(_embed(llm, SHARED[:1]), want[:1])
    _close(_embed(llm, SHARED), want)
    assert llm.engine.core.stats().prefix_cache_hits >= 3 * 20  # the prefix, block by block
    assert llm.engine.core.scheduler.config.enable_chunked_prefill


def test_mean_pooling_runs_each_prompt_whole_without_prefix_hits(decoder):
    llm = LLM(str(decoder), dtype="float32", device="cpu", num_kv_blocks=64, block_size=4,
              pooling="mean", normalize_embeddings=False, max_num_batched_tokens=40)
    _close(_embed(llm, SHARED), _expected(decoder, SHARED, "mean", normalize=False))
    core = llm.engine.core
    assert not core.scheduler.config.enable_chunked_prefill
    assert core.stats().prefix_cache_hits == 0
    assert core.max_model_len == 40  # a prompt runs in one step: no longer than the budget


def test_matryoshka_dimensions_cut_then_normalize(tmp_path):
    path = make_decoder_embedder(tmp_path, is_matryoshka=True)
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=64)
    full = _expected(path, PROMPTS[:3], normalize=False)
    _close(_embed(llm, PROMPTS[:3], dimensions=16),
           torch.nn.functional.normalize(full[:, :16], dim=-1))
    with pytest.raises(ValueError, match="dimensions must be one of 1 to 64"):
        _embed(llm, PROMPTS[:1], dimensions=65)


def test_dimensions_need_a_matryoshka_model(decoder):
    llm = LLM(str(decoder), dtype="float32", device="cpu", num_kv_blocks=64)
    with pytest.raises(ValueError, match="^dimensions is not supported by this model"):
        _embed(llm, PROMPTS[:1], dimensions=8)


def test_a_causal_lm_runs_as_an_embedder_when_asked(tmp_path):
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=64, runner="pooling")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.inference_mode():
        want = torch.stack([pooled(model.model(torch.tensor([p])).last_hidden_state[0], "last",
                                   True) for p in PROMPTS[:3]])
    _close(_embed(llm, PROMPTS[:3]), want)


def test_a_sentence_transformers_causal_lm_pools_by_itself(tmp_path):
    path = make_checkpoint(tmp_path, tiny_configs()["qwen3"])
    write_sentence_transformers_files(path, {"pooling_mode": "mean"}, normalize=False,
                                      max_seq_length=100)
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=64)
    assert llm.engine.pooler is not None
    assert (llm.engine.pooler.pooling, llm.engine.pooler.normalize) == ("mean", False)
    assert llm.engine.max_model_len == 100  # sentence_bert_config.json's max_seq_length


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return make_bert_embedder(tmp_path_factory.mktemp("bert"))


TEXTS = ["the cat sat on the mat", "a dog", "where is the big red house", "cats and dogs",
         "what runs fast"]


def _token_ids(path, texts: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    return [tokenizer.encode(t) for t in texts]


@pytest.mark.parametrize(("options", "pooling", "normalize"), [
    ({}, "mean", False),  # as sentence-transformers pools a BERT without its own config
    ({"pooling": "cls", "normalize_embeddings": True}, "cls", True),
    ({"max_num_seqs": 2, "max_num_batched_tokens": 12}, "mean", False),
])
def test_bert_embeddings_match_hf(bert, options, pooling, normalize):
    llm = LLM(str(bert), dtype="float32", device="cpu", **options)
    assert not llm.engine.core.scheduler.config.enable_chunked_prefill  # bidirectional
    outputs = llm.embed(TEXTS, use_tqdm=False)
    ids = _token_ids(bert, TEXTS)
    assert all(1 not in i for i in ids)  # no [UNK]: the texts are told apart
    assert [o.prompt_token_ids for o in outputs] == ids
    got = torch.tensor([o.outputs.embedding for o in outputs])
    _close(got, _expected(bert, ids, pooling, normalize))


def test_bert_prompt_longer_than_the_context_is_refused(bert):
    llm = LLM(str(bert), dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="longer than the model's context length"):
        llm.embed([[5] * 65], use_tqdm=False)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    return make_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


def test_cross_encoder_scores_match_hf(cross_encoder):
    llm = LLM(str(cross_encoder), dtype="float32", device="cpu")
    query, docs = "where is the cat", ["the cat sat on the mat", "a dog runs", "the red house"]
    pairs = [(query, d) for d in docs] + [("what runs", "the dog runs fast")]
    want = hf_cross_encoder_scores(cross_encoder, pairs)
    assert max(want) - min(want) > 0.05  # the scores differ: the test can tell them apart
    one_to_many = llm.score(query, docs, use_tqdm=False)
    assert [o.outputs.score for o in one_to_many] == pytest.approx(want[:3], abs=ATOL)
    pairwise = llm.score([a for a, _ in pairs], [b for _, b in pairs], use_tqdm=False)
    assert [o.outputs.score for o in pairwise] == pytest.approx(want, abs=ATOL)


def test_cross_encoder_reads_the_pairs_segments(cross_encoder):
    """The same tokens with other segments score differently, as in HF."""
    llm = LLM(str(cross_encoder), dtype="float32", device="cpu")
    pair = llm.engine.input_processor.tokenize_pair("the cat", "the dog")
    flat = {"prompt_token_ids": pair.prompt_token_ids,
            "token_type_ids": [0] * len(pair.prompt_token_ids)}
    got = [o.data[0] for o in llm.encode([pair, flat], PoolingParams(task="score"),
                                         use_tqdm=False)]
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(cross_encoder).eval()
    with torch.inference_mode():
        want = [float(model(torch.tensor([pair.prompt_token_ids]),
                            token_type_ids=torch.tensor([types])).logits[0, 0].sigmoid())
                for types in (pair.token_type_ids, flat["token_type_ids"])]
    assert got == pytest.approx(want, abs=ATOL)
    assert abs(got[0] - got[1]) > 1e-3


def test_bi_encoder_score_is_the_cosine_of_the_embeddings(bert):
    llm = LLM(str(bert), dtype="float32", device="cpu")
    scores = llm.score(TEXTS[0], TEXTS[1:], use_tqdm=False)
    embeddings = _expected(bert, _token_ids(bert, TEXTS), "mean", False)
    want = torch.nn.functional.cosine_similarity(embeddings[:1], embeddings[1:])
    assert [s.outputs.score for s in scores] == pytest.approx(want.tolist(), abs=ATOL)


def test_the_wrong_task_for_the_model_is_an_error(bert, cross_encoder, tmp_path):
    with pytest.raises(ValueError, match="task 'score' is not supported: this model computes "
                                         "embeddings"):
        LLM(str(bert), device="cpu").encode(["the cat"], PoolingParams(task="score"),
                                            use_tqdm=False)
    with pytest.raises(ValueError, match="task 'embed' is not supported: this model scores"):
        LLM(str(cross_encoder), device="cpu").embed(["the cat"], use_tqdm=False)
    generator = LLM(str(make_checkpoint(tmp_path, tiny_configs()["llama"])), device="cpu",
                    num_kv_blocks=64)
    with pytest.raises(ValueError, match="this model generates text: it computes no embeddings"):
        generator.embed(["w5 w6"], use_tqdm=False)
    pooling = LLM(str(bert), device="cpu")
    with pytest.raises(ValueError, match="this model is a pooling model .embeddings.: it does "
                                         "not generate text"):
        pooling.generate(["the cat"], use_tqdm=False)


def test_runner_and_pooler_options_that_do_not_apply_fail_at_load(bert, cross_encoder, tmp_path):
    with pytest.raises(ValueError, match="runner 'generate': BertModel is a pooling model"):
        LLM(str(bert), device="cpu", runner="generate")
    with pytest.raises(ValueError, match="runner 'generate': Qwen3Model is a pooling model"):
        LLM(str(make_decoder_embedder(tmp_path / "q")), device="cpu", runner="generate")
    llama = make_checkpoint(tmp_path / "llama", tiny_configs()["llama"])
    with pytest.raises(ValueError, match="pooling applies to pooling models only"):
        LLM(str(llama), device="cpu", pooling="mean")
    with pytest.raises(ValueError, match="normalize_embeddings does not apply to a cross-encoder"):
        LLM(str(cross_encoder), device="cpu", normalize_embeddings=True)


def test_token_types_are_checked(cross_encoder, bert, decoder):
    llm = LLM(str(cross_encoder), device="cpu")
    with pytest.raises(ValueError, match=r"token type id 2 is out of range \[0, 2\)"):
        llm.encode([{"prompt_token_ids": [2, 5, 3], "token_type_ids": [0, 1, 2]}],
                   PoolingParams(task="score"), use_tqdm=False)
    with pytest.raises(ValueError, match="token_type_ids has 2 entries for 3 prompt tokens"):
        llm.encode([{"prompt_token_ids": [2, 5, 3], "token_type_ids": [0, 1]}],
                   PoolingParams(task="score"), use_tqdm=False)
    embedder = LLM(str(decoder), device="cpu", num_kv_blocks=64)
    with pytest.raises(ValueError, match="token_type_ids are not supported: this model reads"):
        embedder.embed([{"prompt_token_ids": [5, 6], "token_type_ids": [0, 0]}], use_tqdm=False)
