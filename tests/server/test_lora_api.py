"""LoRA adapters over HTTP: an adapter's name as the model (OpenAI and Anthropic APIs), its
card in /v1/models with the base model as parent, loading and unloading at run time behind
the API key; a bad adapter is a 400 naming the problem and the server keeps serving."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from transformers import AutoTokenizer

pytest.importorskip("peft")

from tests.engine.lora_adapters import (  # noqa: E402
    ATTENTION,
    MLP,
    fused_qkv_adapter,
    make_adapter,
    peft_greedy,
)
from tests.server.conftest import API_KEY, MODEL, TINY_SERVER_ARGS  # noqa: E402
from tests.server.server_process import ServerProcess  # noqa: E402

PROMPT = [5, 17, 99, 42]
TOKENS = 6


@pytest.fixture(scope="module")
def lora_server(tiny_model, tmp_path_factory):
    """The tiny model with adapter "attn" from the start (max rank 8), its HF+PEFT greedy
    tokens, and a second adapter "mlp" to load at run time."""
    root = tmp_path_factory.mktemp("lora-server")
    attn = make_adapter(tiny_model, root / "attn", rank=8, alpha=16, targets=ATTENTION, seed=1)
    mlp = make_adapter(tiny_model, root / "mlp", rank=4, alpha=4, targets=MLP, seed=2)
    expected = {name: peft_greedy(tiny_model, path, [PROMPT], TOKENS)[0]
                for name, path in (("attn", attn), ("mlp", mlp), (None, None))}
    process = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS, "--api-key", API_KEY,
                             "--enable-lora", "--max-loras", "2", "--max-lora-rank", "8",
                             "--lora-modules", f"attn={attn}"],
                            root / "serve.log", api_key=API_KEY)
    yield process, {"attn": attn, "mlp": mlp, "root": root}, expected
    process.stop()


def _words(tiny_model, tokens: list[int]) -> list[str]:
    """The words of `tokens` (the word-level tokenizer's; the server's text of a
    continuation starts with the space before its first word)."""
    return AutoTokenizer.from_pretrained(tiny_model).decode(tokens).split()


def _complete(server: ServerProcess, model: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/completions", headers=server.headers, timeout=60,
                      json={"model": model, "prompt": PROMPT, "max_tokens": TOKENS,
                            "temperature": 0.0, "ignore_eos": True})


def test_models_lists_the_adapter_with_its_parent(lora_server):
    server, paths, _ = lora_server
    cards = httpx.get(f"{server.url}/v1/models", headers=server.headers).json()["data"]
    assert [c["id"] for c in cards] == [MODEL, "tiny-alias", "attn"]
    assert cards[2]["parent"] == MODEL and cards[2]["root"] == str(paths["attn"])
    assert "parent" not in cards[0]


def test_the_adapter_name_runs_the_adapter(lora_server, tiny_model):
    server, _, expected = lora_server
    assert expected["attn"] != expected[None]
    for model, want in ((MODEL, expected[None]), ("attn", expected["attn"])):
        body = _complete(server, model).json()
        assert body["model"] == model
        assert body["choices"][0]["text"].split() == _words(tiny_model, want)
    chat = httpx.post(f"{server.url}/v1/messages", headers=server.headers, timeout=60,
                      json={"model": "attn", "max_tokens": 3,
                            "messages": [{"role": "user", "content": "w10 w11"}]})
    assert chat.status_code == 200 and chat.json()["model"] == "attn"


def test_load_and_unload_at_run_time(lora_server, tiny_model):
    server, paths, expected = lora_server
    body = {"lora_name": "mlp", "lora_path": str(paths["mlp"])}
    url = f"{server.url}/v1/load_lora_adapter"
    assert httpx.post(url, json=body).status_code == 401  # behind the API key
    assert httpx.post(url, json=body, headers=server.headers).status_code == 200
    text = _complete(server, "mlp").json()["choices"][0]["text"]
    assert text.split() == _words(tiny_model, expected["mlp"])
    again = httpx.post(url, json=body, headers=server.headers)
    assert again.status_code == 400 and "'mlp' is already in use" in again.text
    unload = f"{server.url}/v1/unload_lora_adapter"
    assert httpx.post(unload, json={"lora_name": "mlp"}, headers=server.headers).status_code == 200
    assert _complete(server, "mlp").status_code == 404
    assert httpx.post(unload, json={"lora_name": "mlp"},
                      headers=server.headers).status_code == 404


def test_bad_adapters_are_400s_naming_the_problem(lora_server, tiny_model, tmp_path):
    server, paths, expected = lora_server
    rank16 = make_adapter(tiny_model, tmp_path / "rank16", rank=16, alpha=16,
                          targets=ATTENTION, seed=3)
    missing = tmp_path / "missing"
    shutil.copytree(paths["attn"], missing)
    (missing / "adapter_model.safetensors").unlink()
    shaped = tmp_path / "shaped"
    shutil.copytree(paths["attn"], shaped)
    from safetensors.torch import load_file, save_file
    tensors = load_file(shaped / "adapter_model.safetensors")
    key = next(k for k in tensors if "lora_A" in k)
    tensors[key] = tensors[key][:, :32].contiguous()  # input features of another model
    save_file(tensors, shaped / "adapter_model.safetensors")
    dora = tmp_path / "dora"
    shutil.copytree(paths["attn"], dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    fused = fused_qkv_adapter(paths["attn"], tmp_path / "fused")  # refused by the workers
    cases = {fused: "'model.layers.0.self_attn.qkv_proj' is not a layer of this model",
             rank16: "rank 16 is over max_lora_rank 8",
             missing: "adapter_model.safetensors not found",
             shaped: "the base model and rank 8 need [8, 64]",
             dora: "use_dora: DoRA adapters are not supported"}
    for i, (path, problem) in enumerate(cases.items()):
        response = httpx.post(f"{server.url}/v1/load_lora_adapter", headers=server.headers,
                              json={"lora_name": f"bad{i}", "lora_path": str(path)})
        assert response.status_code == 400, response.text
        assert problem in response.json()["error"]["message"]
    names = [c["id"] for c in httpx.get(f"{server.url}/v1/models",
                                        headers=server.headers).json()["data"]]
    assert not any(n.startswith("bad") for n in names)
    text = _complete(server, "attn").json()["choices"][0]["text"]
    assert text.split() == _words(tiny_model, expected["attn"])
