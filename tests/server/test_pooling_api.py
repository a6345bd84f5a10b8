"""Pooling models behind a real `pagoda serve`: /v1/embeddings with the official `openai`
client (the real all-MiniLM-L6-v2 against sentence-transformers; responses valid per the
OpenAI spec; float and base64), /v1/score and /v1/rerank for a bi-encoder and a tiny
cross-encoder (against HF), and 400s naming the problem for the wrong kind of model."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
import torch

from tests.models.tiny_pooling import hf_cross_encoder_scores, make_cross_encoder
from tests.real_model.minilm import minilm_path, st_embeddings, st_token_counts
from tests.server.openai_spec import EMBEDDING_BASE64, validate
from tests.server.server_process import ServerProcess

TEXTS = ["A man is eating food.", "A man is eating a piece of bread.",
         "The girl is carrying a baby.", "Vectors of meaning. " * 30]
MAX_ABS_DIFF = 1e-5
"""float32 on both sides (see tests/real_model/test_minilm_embeddings.py)."""
SERVE = ["--dtype", "float32", "--device", "cpu"]


@pytest.fixture(scope="module")
def minilm_server(tmp_path_factory):
    process = ServerProcess([str(minilm_path()), *SERVE, "--served-model-name", "minilm"],
                            tmp_path_factory.mktemp("minilm") / "serve.log")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(minilm_server) -> openai.OpenAI:
    with openai.OpenAI(base_url=f"{minilm_server.url}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


def _close(got: list[list[float]], want: torch.Tensor) -> None:
    got_t = torch.tensor(got)
    assert got_t.shape == want.shape
    assert (got_t - want).abs().max() <= MAX_ABS_DIFF


def test_float_embeddings_match_sentence_transformers(client):
    raw = client.embeddings.with_raw_response.create(model="minilm", input=TEXTS,
                                                     encoding_format="float")
    body = raw.http_response.json()
    validate("CreateEmbeddingResponse", body)
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    _close([d["embedding"] for d in body["data"]], st_embeddings(minilm_path(), TEXTS))
    tokens = sum(st_token_counts(minilm_path(), TEXTS))
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert body["model"] == "minilm"


def test_base64_is_the_little_endian_float32_bytes(client):
    floats = client.embeddings.with_raw_response.create(
        model="minilm", input=TEXTS[:2], encoding_format="float").http_response.json()
    raw = client.embeddings.with_raw_response.create(model="minilm", input=TEXTS[:2],
                                                     encoding_format="base64")
    body = raw.http_response.json()
    validate(EMBEDDING_BASE64, body)
    for encoded, plain in zip(body["data"], floats["data"], strict=True):
        values = np.frombuffer(base64.b64decode(encoded["embedding"]), dtype="<f4")
        # Equal up to the batch: each request's texts may share a step or not.
        assert values.tolist() == pytest.approx(plain["embedding"], abs=1e-6)


def test_the_clients_default_request_decodes_to_the_same(client):
    """The `openai` client asks for base64 unless told otherwise, and decodes it."""
    result = client.embeddings.create(model="minilm", input=TEXTS)
    _close([e.embedding for e in result.data], st_embeddings(minilm_path(), TEXTS))


def test_token_id_inputs(client):
    from transformers import AutoTokenizer

    ids = [AutoTokenizer.from_pretrained(minilm_path()).encode(t) for t in TEXTS[:2]]
    want = st_embeddings(minilm_path(), TEXTS[:2])
    one = client.embeddings.create(model="minilm", input=ids[0], encoding_format="float")
    _close([one.data[0].embedding], want[:1])
    several = client.embeddings.create(model="minilm", input=ids, encoding_format="float")
    _close([e.embedding for e in several.data], want)


@pytest.mark.parametrize(("fields", "param", "message"), [
    ({"dimensions": 8}, "dimensions", "dimensions is not supported by this model"),
    ({"input": ""}, "input", "input must not hold an empty text"),
    ({"input": [[1, 2], []]}, "input", "input must not hold an empty text or token list"),
    ({"input": "word " * 300}, "input", "longer than the model's context length"),
    ({"input": [10**6]}, "input", "out of range"),
    ({"encoding_format": "int8"}, "encoding_format", "encoding_format"),
    ({"normalize": True}, "normalize", "unknown field 'normalize'"),
])
def test_invalid_requests_answer_400_naming_the_field(minilm_server, fields, param, message):
    response = httpx.post(f"{minilm_server.url}/v1/embeddings",
                          json={"model": "minilm", "input": "hello", **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and message in error["message"]


def test_a_pooling_model_does_not_complete(minilm_server):
    response = httpx.post(f"{minilm_server.url}/v1/completions",
                          json={"model": "minilm", "prompt": "hello", "max_tokens": 4})
    assert response.status_code == 400
    assert "pooling model (embeddings): it does not generate text" in (
        response.json()["error"]["message"])


def test_a_generating_model_has_no_embeddings(server):
    response = httpx.post(f"{server.url}/v1/embeddings", headers=server.headers,
                          json={"model": "tiny", "input": "w5 w6"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "model"
    assert "generates text: it computes no embeddings or scores" in error["message"]


def test_bi_encoder_score_and_rerank(minilm_server):
    embeddings = st_embeddings(minilm_path(), TEXTS)
    cosines = torch.nn.functional.cosine_similarity(embeddings[:1], embeddings[1:]).tolist()
    scored = httpx.post(f"{minilm_server.url}/v1/score",
                        json={"model": "minilm", "text_1": TEXTS[0], "text_2": TEXTS[1:]})
    assert scored.status_code == 200, scored.text
    body = scored.json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert [d["score"] for d in body["data"]] == pytest.approx(cosines, abs=MAX_ABS_DIFF)
    reranked = httpx.post(f"{minilm_server.url}/rerank", json={
        "query": TEXTS[0], "documents": TEXTS[1:], "top_n": 2}).json()
    best = sorted(range(3), key=lambda i: -cosines[i])[:2]
    assert [r["index"] for r in reranked["results"]] == best
    assert [r["document"]["text"] for r in reranked["results"]] == [TEXTS[1 + i] for i in best]
    assert [r["relevance_score"] for r in reranked["results"]] == pytest.approx(
        [cosines[i] for i in best], abs=MAX_ABS_DIFF)


def test_score_lists_must_pair_up(minilm_server):
    response = httpx.post(f"{minilm_server.url}/v1/score",
                          json={"text_1": ["a", "b"], "text_2": ["c", "d", "e"]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "text_2"


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    path = make_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))
    process = ServerProcess([str(path), *SERVE, "--served-model-name", "reranker"],
                            tmp_path_factory.mktemp("reranker") / "serve.log")
    yield path, process
    process.stop()


QUERY = "where is the cat"
DOCS = ["the cat sat on the mat", "a dog runs", "the red house", "what is the big cat"]


def test_cross_encoder_rerank_and_score_match_hf(cross_encoder):
    path, server = cross_encoder
    want = hf_cross_encoder_scores(path, [(QUERY, d) for d in DOCS])
    reranked = httpx.post(f"{server.url}/v1/rerank", json={
        "model": "reranker", "query": QUERY, "documents": DOCS, "return_documents": False})
    assert reranked.status_code == 200, reranked.text
    results = reranked.json()["results"]
    assert [r["index"] for r in results] == sorted(range(len(DOCS)), key=lambda i: -want[i])
    assert all("document" not in r for r in results)
    assert [r["relevance_score"] for r in results] == pytest.approx(
        sorted(want, reverse=True), abs=MAX_ABS_DIFF)
    scored = httpx.post(f"{server.url}/score", json={"text_1": [QUERY] * 2,
                                                     "text_2": DOCS[:2]}).json()
    assert [d["score"] for d in scored["data"]] == pytest.approx(want[:2], abs=MAX_ABS_DIFF)
    assert scored["usage"]["prompt_tokens"] > 0


def test_a_cross_encoder_has_no_embeddings(cross_encoder):
    _, server = cross_encoder
    response = httpx.post(f"{server.url}/v1/embeddings", json={"input": "the cat"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "model" and "scores text pairs" in error["message"]
