"""The fp8 KV cache through the whole engine (CPU, cpu_sdpa): twice the blocks of a 16-bit
cache in the same bytes; a tiny float32 Llama's logprobs stay close to the float32 cache's
and its greedy tokens agree wherever the float32 margins are clear, with chunked prefill and
prefix caching; the checkpoint's k_scale/v_scale (or k_proj/v_proj output_scale) set what is
stored, and are accepted and ignored by a cache that is not fp8; a backend without fp8 is
refused by name."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from pagoda import LLM, SamplingParams
from pagoda.attention.reference import quantize_fp8
from pagoda.attention.selector import AttentionBackendError
from tests.engine.tiny_models import VOCAB, save_tokenizer, tiny_configs

FP8 = torch.float8_e4m3fn
SCALES = [(0.011, 0.009), (0.013, 0.008)]
"""Per layer (key, value): about amax / 448 of this model's keys and values (3.5 to 3.75),
so nothing saturates and the stored values use e4m3's whole range."""

TOL = 0.25
"""Largest |logprob difference| allowed between the fp8 and the float32 cache over the
whole vocabulary, while the tokens so far agree. Measured: 0.07 to 0.13 (a bfloat16 cache:
0.003 to 0.006, about 16x less, as e4m3 keeps 3 mantissa bits to bfloat16's 7)."""

MARGIN = 2 * TOL
"""A float32 top-1 lead over the runner-up that no change within TOL can overturn."""


def _checkpoint(path: Path, scale_names: str | None = None) -> Path:
    """A tiny float32 Llama with weights large enough for peaked attention and varied
    logits (matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 1)), and, if asked, KV cache
    scales under compressed-tensors' names ("k_scale") or older FP8 ones ("output_scale")."""
    torch.manual_seed(0)
    config = tiny_configs()["llama"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2:
                param.normal_(0, 1.0 if "embed" in name else param.shape[1] ** -0.5)
    model.save_pretrained(path)
    save_tokenizer(path)
    if scale_names is not None:
        tensors = load_file(path / "model.safetensors")
        for i, (k, v) in enumerate(SCALES):
            prefix = f"model.layers.{i}.self_attn."
            if scale_names == "k_scale":
                tensors[prefix + "k_scale"] = torch.tensor(k)
                tensors[prefix + "v_scale"] = torch.tensor([v])
            else:
                tensors[prefix + "k_proj.output_scale"] = torch.tensor(k)
                tensors[prefix + "v_proj.output_scale"] = torch.tensor(v)
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
        if scale_names == "k_scale":  # what compressed-tensors writes beside them
            config_file = path / "config.json"
            hf = json.loads(config_file.read_text())
            hf["quantization_config"] = {
                "quant_method": "compressed-tensors", "config_groups": {},
                "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                                    "dynamic": False, "symmetric": True}}
            config_file.write_text(json.dumps(hf))
    return path


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module", params=["k_scale", "output_scale"])
def scaled(request, tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def _prompts() -> tuple[list[list[int]], list[list[int]]]:
    """Mixed lengths (chunked by an 8-token budget), then three sharing a 21-token prefix
    with one of the first (prefix-cached)."""
    rng = random.Random(1)
    words = lambda n: [rng.randrange(3, VOCAB) for _ in range(n)]  # noqa: E731
    first = [words(n) for n in (3, 17, 9, 30)]
    prefix = words(21)
    first.append(prefix + words(5))
    return first, [prefix + words(n) for n in (9, 2, 13)]


def _llm(path: Path, kv_cache_dtype: str, **kwargs: object) -> LLM:
    options = dict(dtype="float32", device="cpu", num_kv_blocks=128, block_size=4,
                   max_num_batched_tokens=8) | kwargs
    return LLM(str(path), kv_cache_dtype=kv_cache_dtype, **options)  # type: ignore[arg-type]


def _run(llm: LLM) -> list[tuple[list[int], torch.Tensor]]:
    """Each request's greedy tokens and [steps, VOCAB] logprobs; the prefix sharers run
    after the first batch, so their prefix comes from the cache."""
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True, logprobs=VOCAB)
    results = []
    for batch in _prompts():
        for out in llm.generate([{"prompt_token_ids": p} for p in batch], params,
                                use_tqdm=False):
            completion = out.outputs[0]
            rows = torch.full((len(completion.token_ids), VOCAB), float("nan"))
            for row, step in zip(rows, completion.logprobs, strict=True):
                row[step.token_ids[1:]] = torch.tensor(step.logprobs[1:])  # the top-VOCAB
            assert not rows.isnan().any()
            results.append((completion.token_ids, rows))
    assert llm.engine.core.stats().prefix_cache_hits >= 3 * 20  # the prefix, block by block
    return results


def test_fp8_cache_holds_twice_the_blocks_of_bfloat16(plain: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pagoda.worker.worker")
    blocks = {}
    for dtype in ("float32", "bfloat16", "fp8"):
        llm = _llm(plain, dtype, num_kv_blocks=None, kv_cache_memory=1 << 20)
        info = llm.engine.core.info
        blocks[dtype] = info["kv_cache_blocks"]
        assert info["kv_cache_dtype"] == dtype
    # a block: 4 tokens x 2 KV heads x 16 dims x (key, value) x 2 layers x element size
    assert blocks == {"float32": (1 << 20) // 2048, "bfloat16": (1 << 20) // 1024,
                      "fp8": (1 << 20) // 512}
    assert blocks["fp8"] == 2 * blocks["bfloat16"] == 4 * blocks["float32"]
    assert any(f"KV cache: {blocks['fp8']} blocks of 4 tokens in fp8" in r.message
               for r in caplog.records)


@pytest.mark.parametrize("with_scales", [False, True], ids=["scale-1", "checkpoint-scales"])
def test_fp8_cache_logprobs_and_greedy_tokens(plain: Path, tmp_path: Path,
                                              with_scales: bool) -> None:
    path = _checkpoint(tmp_path, "k_scale") if with_scales else plain
    want = _run(_llm(plain, "float32"))
    got = _run(_llm(path, "fp8"))
    checked = steps = 0
    for (want_tokens, want_lp), (got_tokens, got_lp) in zip(want, got, strict=True):
        steps += len(want_tokens)
        for i, (w, g) in enumerate(zip(want_tokens, got_tokens, strict=True)):
            diff = (got_lp[i] - want_lp[i]).abs().max().item()
            assert diff <= TOL, f"step {i}: logprobs differ by {diff:.3f}"
            top2 = want_lp[i].topk(2).values
            if top2[0] - top2[1] > MARGIN:
                assert g == w, f"step {i}: fp8 chose {g}, float32 {w} by a clear margin"
                checked += 1
            if g != w:
                break  # the contexts differ from here on: nothing left to compare
    assert checked >= steps // 8, f"only {checked} of {steps} steps had clear margins"


def _zeroed_caches(llm: LLM) -> list[torch.Tensor]:
    caches = llm.engine.core.executor.worker.runner.kv_caches
    for cache in caches:
        cache.view(torch.uint8).zero_()
    return caches


def test_checkpoint_scales_set_the_stored_values(scaled: Path, plain: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """One 13-token prefill: layer 0's stored keys and values are exactly the float32
    cache's divided by the checkpoint's scales and rounded to e4m3; layer 1's (whose
    inputs went through layer 0's fp8 attention) read back close to the float32 ones."""
    caplog.set_level(logging.INFO, logger="pagoda.models.layers.attention")
    prompt = [{"prompt_token_ids": list(range(40, 53))}]
    once = SamplingParams(temperature=0.0, max_tokens=1)
    llm = _llm(scaled, "fp8")
    worker = llm.engine.core.executor.worker
    assert [m.self_attn.attn.kv_scales.tolist() for m in worker.model.model.layers] == [
        pytest.approx(list(s)) for s in SCALES]
    assert any("fp8 KV cache with the checkpoint's scales" in r.message for r in caplog.records)
    fp8 = _zeroed_caches(llm)
    llm.generate(prompt, once, use_tqdm=False)
    full = _llm(plain, "float32")
    f32 = _zeroed_caches(full)
    full.generate(prompt, once, use_tqdm=False)

    written = f32[0].abs().sum(dim=(0, 3, 4)) != 0  # [blocks, block size]
    assert int(written.sum()) == 13
    for i, (key_scale, value_scale) in enumerate(SCALES[:1]):
        want = torch.stack([quantize_fp8(f32[i][0], torch.tensor(key_scale)),
                            quantize_fp8(f32[i][1], torch.tensor(value_scale))])
        assert torch.equal(fp8[i].view(torch.uint8), want.view(torch.uint8))
        unscaled = quantize_fp8(f32[i][0], torch.tensor(1.0))
        assert not torch.equal(fp8[i][0].view(torch.uint8), unscaled.view(torch.uint8))
    key_scale, value_scale = SCALES[1]
    read = fp8[1].float() * torch.tensor([key_scale, value_scale]).view(2, 1, 1, 1, 1)
    error = (read - f32[1]).norm() / f32[1].norm()
    assert error < 0.1, f"layer 1 reads back {error:.1%} off"


def test_scales_are_ignored_by_a_float32_cache(scaled: Path, plain: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pagoda.models.layers.attention")
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in _prompts()[0]]
    with_scales = _llm(scaled, "float32").generate(prompts, greedy, use_tqdm=False)
    ignored = [r.message for r in caplog.records if "ignored" in r.message]
    assert ignored == ["The checkpoint's KV cache scales (2 layers) are ignored: the KV cache "
                       "is float32, not fp8"]
    without = _llm(plain, "float32").generate(prompts, greedy, use_tqdm=False)
    assert ([o.outputs[0].token_ids for o in with_scales]
            == [o.outputs[0].token_ids for o in without])


def test_fp8_cache_without_checkpoint_scales_says_so(plain: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pagoda.models.layers.attention")
    llm = _llm(plain, "fp8_e4m3")
    assert llm.engine.core.info["kv_cache_dtype"] == "fp8"
    said = [r.message for r in caplog.records if "KV cache scales" in r.message]
    assert said == ["fp8 KV cache: the checkpoint has no KV cache scales (k_scale/v_scale), "
                    "so every layer's are 1.0"]


def test_per_head_scales_are_refused(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.0.self_attn.k_scale"] = torch.tensor([0.1, 0.2])
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"'model.layers.0.self_attn.k_scale' has shape \(2,\)"
                                         r": only per-tensor scales"):
        _llm(path, "fp8")


def test_backend_without_fp8_is_refused_by_name(plain: Path) -> None:
    with pytest.raises(AttentionBackendError) as err:
        _llm(plain, "fp8", device="template", attention_backend="template")
    assert str(err.value) == (
        "Attention backend 'template' cannot be used: kv cache dtype fp8 not supported (it "
        "supports float32, float16, bfloat16) (backends on 'template' that can: reference)")
    # Left to choose, the template platform falls back to core's reference backend.
    llm = _llm(plain, "fp8", device="template")
    assert llm.engine.core.info["attention_backend"] == "reference"
