"""The Triton kernels drive the real model: a tiny Qwen3's greedy tokens with every Triton op
and the "triton" attention backend equal those of the CPU platform's own kernels, with a
float32 and with an fp8 KV cache, and a tiny Gemma 2's (GELU-tanh, soft-capped sliding
attention, 1 + weight norms) likewise (here in Triton's CPU interpreter;
tests/platforms/cuda checks the same on a GPU)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("triton")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.plugins import (  # noqa: E402
    AttentionBackendSpec,
    KernelProvider,
    get_registries,
    reset_registries,
)
from tests.engine.tiny_models import (  # noqa: E402
    VOCAB,
    dense_family_configs,
    make_checkpoint,
    tiny_configs,
)

TRITON_OPS = ("linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul",
              "gelu_and_mul")
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def _greedy(path: Path, prompts: list[list[int]], **kwargs: object) -> tuple[list, dict]:
    """Greedy tokens of each prompt (mixed prefill chunks and decodes), and the engine info."""
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=64, block_size=8,
              max_num_batched_tokens=16, **kwargs)  # type: ignore[arg-type]
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs], llm.engine.core.info


@pytest.mark.parametrize(("arch", "kv_cache_dtype"),
                         [("qwen3", "auto"), ("qwen3", "fp8"), ("gemma2", "auto")])
def test_greedy_tokens_match_cpu_kernels(device: str, tmp_path: Path, arch: str,
                                         kv_cache_dtype: str) -> None:
    if device != "cpu":
        pytest.skip("on a GPU, tests/platforms/cuda runs the engine with these kernels")
    if arch == "qwen3":  # q/k norms, GQA 4/2
        path = make_checkpoint(tmp_path, tiny_configs()["qwen3"])
    else:
        path = make_checkpoint(tmp_path, dense_family_configs()[arch], random_weights=True)
    rng = random.Random(5)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 19, 1, 9)]
    expected, _ = _greedy(path, prompts, kv_cache_dtype=kv_cache_dtype)
    regs = get_registries()
    try:
        regs.attention_backends.add(AttentionBackendSpec(
            "triton", "pagoda.kernels.triton.backend:TritonAttentionBackend", ("cpu",),
            priority=100), "test")
        for op in TRITON_OPS:
            regs.kernels.add(KernelProvider(op, "triton", f"pagoda.kernels.triton:{op}",
                                            ("cpu",), priority=100), "test")
        tokens, info = _greedy(path, prompts, attention_backend="triton",
                               kv_cache_dtype=kv_cache_dtype)
        assert info["attention_backend"] == "triton"
        assert {op: info["ops"][op] for op in TRITON_OPS} == dict.fromkeys(TRITON_OPS,
                                                                          "test/triton")
        assert tokens == expected
    finally:
        reset_registries()


def test_verify_graphs_with_the_triton_backend(device: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Speculative verify steps replayed from graphs of 1 + k tokens a sequence through the
    Triton attention kernel: each captured step's tokens split among its sequences as the
    drafts fall (padding tokens are sequences of length 0), the tokens HF's."""
    if device != "cpu":
        pytest.skip("on a GPU, tests/platforms/cuda captures real graphs")
    from tests.engine.test_decode_graphs import capture_graphs
    from tests.engine.test_speculative import NEW_TOKENS, PROMPTS, SPECULATIVE
    from tests.engine.tiny_models import hf_greedy

    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    regs = get_registries()
    try:
        regs.attention_backends.add(AttentionBackendSpec(
            "triton", "pagoda.kernels.triton.backend:TritonAttentionBackend", ("cpu",),
            priority=100), "test")
        llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=128, block_size=4,
                  attention_backend="triton", enforce_eager=True, graph_batch_sizes=[2, 4],
                  **SPECULATIVE)
        replays = capture_graphs(llm, monkeypatch)
        params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
        outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params,
                               use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outputs] == hf_greedy(path, PROMPTS,
                                                                       NEW_TOKENS)
        assert replays["ModelRunner", 4] >= NEW_TOKENS // 4
    finally:
        reset_registries()
