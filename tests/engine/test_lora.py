"""LoRA adapters: greedy tokens equal HF transformers running the same PEFT adapter, for
batches that mix three adapters and the base model, under chunked prefill, preemption and
prefix caching (blocks never shared between adapters), and speculative decoding; bad
adapters are refused naming the problem."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("peft")

from pagoda import LLM, LoRARequest, SamplingParams  # noqa: E402
from tests.engine.lora_adapters import (  # noqa: E402
    ATTENTION,
    MLP,
    fused_qkv_adapter,
    make_adapter,
    peft_greedy,
)
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs  # noqa: E402

NEW_TOKENS = 8
_rng = random.Random(7)
SHARED_PREFIX = [_rng.randrange(3, VOCAB) for _ in range(20)]
PROMPTS = [[_rng.randrange(3, VOCAB) for _ in range(n)] for n in (5, 13, 3)] + [
    SHARED_PREFIX + [_rng.randrange(3, VOCAB) for _ in range(n)] for n in (2, 6)]
"""Prompts of odd lengths, two of them sharing five blocks of 4 (prefix caching)."""

ADAPTERS = {  # name: (rank, alpha, targets, rslora)
    "attn": (8, 16, ATTENTION, False),
    "mlp": (4, 8, MLP, False),
    "all": (16, 8, ATTENTION + MLP, True),
}
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module", params=["llama"])
def models(request, tmp_path_factory):
    """(base dir, {name: LoRARequest}, {name or None: HF+PEFT greedy tokens of PROMPTS})."""
    root = tmp_path_factory.mktemp(f"lora-{request.param}")
    base = make_checkpoint(root / "base", tiny_configs()[request.param])
    loras, expected = {}, {None: peft_greedy(base, None, PROMPTS, NEW_TOKENS)}
    for i, (name, (rank, alpha, targets, rslora)) in enumerate(ADAPTERS.items()):
        path = make_adapter(base, root / name, rank=rank, alpha=alpha, targets=targets,
                            seed=i, rslora=rslora)
        loras[name] = LoRARequest(name, i + 1, str(path))
        expected[name] = peft_greedy(base, path, PROMPTS, NEW_TOKENS)
    return base, loras, expected


def _mixed(loras: dict[str, LoRARequest]) -> list[str | None]:
    """Every prompt under every adapter and the base model, interleaved."""
    return [name for _ in PROMPTS for name in (*loras, None)]


def _run(llm: LLM, loras: dict[str, LoRARequest], names: list[str | None]) -> list[list[int]]:
    prompts = [PROMPTS[i // (len(loras) + 1)] for i in range(len(names))]
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False,
                           lora_request=[loras[n] if n else None for n in names])
    return [o.outputs[0].token_ids for o in outputs]


def _want(expected: dict, loras: dict, names: list[str | None]) -> list[list[int]]:
    return [expected[n][i // (len(loras) + 1)] for i, n in enumerate(names)]


def test_adapters_change_the_tokens(models):
    """The reference is worth checking against: every adapter changes some output."""
    _, _, expected = models
    assert all(expected[name] != expected[None] for name in ADAPTERS)


@pytest.mark.parametrize("options", [
    dict(max_loras=3),
    dict(max_loras=2, max_num_batched_tokens=12, block_size=4),  # chunked; slots swap
    dict(max_loras=1, num_kv_blocks=14, block_size=4, max_num_seqs=8),  # preemption
    dict(max_loras=3, speculative_method="ngram", num_speculative_tokens=2),  # drafts too
], ids=["one-batch", "chunked-two-slots", "preempting-one-slot", "speculating"])
def test_mixed_batch_matches_peft(models, options):
    base, loras, expected = models
    llm = LLM(str(base), dtype="float32", device="cpu", enable_lora=True,
              **{"num_kv_blocks": 256, **options})
    names = _mixed(loras)
    assert _run(llm, loras, names) == _want(expected, loras, names)
    if "num_kv_blocks" in options:
        assert llm.engine.core.scheduler.num_preemptions > 0
    if "speculative_method" in options:
        assert llm.engine.core.stats().spec_draft_tokens > 0


def test_prefix_cache_is_per_adapter(models):
    """The shared-prefix prompts run under one adapter, then under another and the base
    model: the later ones must not reuse the first one's blocks (their KV differs)."""
    base, loras, expected = models
    llm = LLM(str(base), dtype="float32", device="cpu", enable_lora=True, max_loras=3,
              num_kv_blocks=256, block_size=4)
    shared = [3, 4]  # the indices of PROMPTS with the shared prefix
    for name in ("attn", "all", None, "attn"):
        outputs = llm.generate([{"prompt_token_ids": PROMPTS[i]} for i in shared], GREEDY,
                               use_tqdm=False, lora_request=loras[name] if name else None)
        assert [o.outputs[0].token_ids for o in outputs] == [expected[name][i] for i in shared]
    stats = llm.engine.core.kv_cache.stats
    assert stats.hits > 0  # the second "attn" round, and siblings within a round, hit


def _copy_adapter(src, dst, edit_config=None, drop=None):
    dst.mkdir()
    config = json.loads((src / "adapter_config.json").read_text())
    if edit_config:
        config.update(edit_config)
    (dst / "adapter_config.json").write_text(json.dumps(config))
    if drop != "adapter_model.safetensors":
        (dst / "adapter_model.safetensors").write_bytes(
            (src / "adapter_model.safetensors").read_bytes())
    return dst


def test_bad_adapters_are_refused_naming_the_problem(models, tmp_path):
    base, loras, expected = models
    llm = LLM(str(base), dtype="float32", device="cpu", enable_lora=True, max_lora_rank=8,
              num_kv_blocks=64)
    src = __import__("pathlib").Path(loras["attn"].lora_path)
    other = make_checkpoint(tmp_path / "other", tiny_configs()["qwen3"])  # head_dim 32
    wrong_base = make_adapter(other, tmp_path / "wrong-base", rank=4, alpha=8,
                              targets=ATTENTION, seed=9)
    cases = {
        "rank 16 is over max_lora_rank 8": loras["all"].lora_path,
        "adapter_model.safetensors not found": _copy_adapter(
            src, tmp_path / "missing", drop="adapter_model.safetensors"),
        "(an adapter of another base model?)": wrong_base,
        "use_dora: DoRA adapters are not supported": _copy_adapter(
            src, tmp_path / "dora", {"use_dora": True}),
        # Found by the engine, not the front end: this model's q/k/v are separate layers.
        "'model.layers.0.self_attn.qkv_proj' is not a layer of this model": fused_qkv_adapter(
            src, tmp_path / "fused"),
    }
    prompt = [{"prompt_token_ids": PROMPTS[0]}]
    for i, (problem, path) in enumerate(cases.items()):
        with pytest.raises(ValueError, match=__import__("re").escape(problem)):
            llm.generate(prompt, GREEDY, use_tqdm=False,
                         lora_request=LoRARequest(f"bad{i}", 10 + i, str(path)))
    out = llm.generate(prompt, GREEDY, use_tqdm=False, lora_request=loras["attn"])
    assert out[0].outputs[0].token_ids == expected["attn"][0]  # still serving


def test_lora_off_refuses_a_lora_request(models):
    base, loras, _ = models
    llm = LLM(str(base), dtype="float32", device="cpu", num_kv_blocks=64)
    with pytest.raises(ValueError, match="LoRA is off"):
        llm.generate([{"prompt_token_ids": PROMPTS[0]}], GREEDY, use_tqdm=False,
                     lora_request=loras["attn"])


FAMILIES = ["qwen2", "mistral", "qwen3", "gemma2", "gemma3", "phi3"]


@pytest.mark.parametrize("arch", FAMILIES)
def test_every_dense_family(arch, tmp_path):
    """Adapters of every linear layer (PEFT's all-linear: Phi-3's fused qkv_proj and
    gate_up_proj too; Qwen2's biased qkv) beside the base model in one batch."""
    from tests.engine.tiny_models import dense_family_configs

    config = (tiny_configs() | dense_family_configs())[arch]
    base = make_checkpoint(tmp_path / "base", config)
    prompts = PROMPTS[:3]
    loras, expected = {}, {None: peft_greedy(base, None, prompts, NEW_TOKENS)}
    for i, rank in enumerate((4, 8)):
        path = make_adapter(base, tmp_path / f"a{i}", rank=rank, alpha=2 * rank,
                            targets="all-linear", seed=10 + i)
        loras[f"a{i}"] = LoRARequest(f"a{i}", i + 1, str(path))
        expected[f"a{i}"] = peft_greedy(base, path, prompts, NEW_TOKENS)
    assert all(expected[name] != expected[None] for name in loras)
    llm = LLM(str(base), dtype="float32", device="cpu", enable_lora=True, max_loras=2,
              max_lora_rank=8, num_kv_blocks=64)
    names = [name for _ in prompts for name in (*loras, None)]
    outputs = llm.generate([{"prompt_token_ids": prompts[i // 3]} for i in range(len(names))],
                           GREEDY, use_tqdm=False,
                           lora_request=[loras[n] if n else None for n in names])
    assert [o.outputs[0].token_ids for o in outputs] == [
        expected[n][i // 3] for i, n in enumerate(names)]
