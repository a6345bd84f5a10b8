"""LoRA adapters under model parallelism on the CPU over gloo: a column-parallel layer's
ranks each hold their block of B (per part of a merged qkv or gate/up layer, Phi-3's
fused ones cut per part first, a replicated key/value head whole), a row-parallel layer's
their block of A with the delta summed by the layer's all-reduce, and a pipeline stage
only its own layers' adapters; greedy tokens equal HF transformers running the PEFT
adapters, in a batch mixing two adapters and the base model, with chunked prefill."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaConfig

pytest.importorskip("peft")

from pagoda import LLM, LoRARequest, SamplingParams  # noqa: E402
from tests.engine.lora_adapters import make_adapter, peft_greedy  # noqa: E402
from tests.engine.tiny_models import (  # noqa: E402
    VOCAB,
    dense_family_configs,
    make_checkpoint,
    tiny_configs,
)

NEW_TOKENS = 6
PROMPTS = [[(7 * i + 3 * j) % (VOCAB - 3) + 3 for j in range(n)] for i, n in enumerate((3, 11, 6))]
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _configs() -> dict[str, object]:
    llama = tiny_configs()["llama"]
    mqa = LlamaConfig(**{**llama.to_dict(), "num_key_value_heads": 1})
    return {"llama": llama, "mqa": mqa, "phi3": dense_family_configs()["phi3"]}


CASES = [("tp2", "mqa"), ("tp2", "phi3"), ("pp2", "llama")]
"""Phi-3's key/value heads split over the ranks, the MQA model's one replicated."""
LAYOUTS = {"tp2": {"tensor_parallel_size": 2}, "pp2": {"pipeline_parallel_size": 2}}


@pytest.mark.parametrize(("layout", "arch"), CASES, ids=[f"{lay}-{a}" for lay, a in CASES])
def test_parallel_ranks_apply_adapters_like_peft(layout: str, arch: str,
                                                 tmp_path: Path) -> None:
    base = make_checkpoint(tmp_path / "base", _configs()[arch])
    loras, expected = {}, {None: peft_greedy(base, None, PROMPTS, NEW_TOKENS)}
    for i, rank in enumerate((4, 8)):
        path = make_adapter(base, tmp_path / f"a{i}", rank=rank, alpha=2 * rank,
                            targets="all-linear", seed=20 + i)
        loras[f"a{i}"] = LoRARequest(f"a{i}", i + 1, str(path))
        expected[f"a{i}"] = peft_greedy(base, path, PROMPTS, NEW_TOKENS)
    assert all(expected[name] != expected[None] for name in loras)
    names = [name for _ in PROMPTS for name in (*loras, None)]
    llm = LLM(str(base), dtype="float32", device="cpu", enable_lora=True, max_loras=2,
              max_lora_rank=8, max_num_batched_tokens=8, num_kv_blocks=64, block_size=4,
              **LAYOUTS[layout])
    try:
        outputs = llm.generate([{"prompt_token_ids": PROMPTS[i // 3]}
                                for i in range(len(names))], GREEDY, use_tqdm=False,
                               lora_request=[loras[n] if n else None for n in names])
        assert [o.outputs[0].token_ids for o in outputs] == [
            expected[n][i // 3] for i, n in enumerate(names)]
    finally:
        llm.engine.shutdown()
