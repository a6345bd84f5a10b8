"""The engine on XLA's CPU device (`--device tpu` with PJRT_DEVICE=CPU) generates what it
generates on the CPU platform: the same greedy tokens for each tiny architecture of the
engine tests, one prompt at a time and in a mixed batch, with chunked prefill and
preemption; seeded sampling and logprobs agree too (they run in core's sampler on the host)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("torch_xla", reason="torch_xla is not installed (bash ci/tpu.sh runs these)")
pytestmark = pytest.mark.usefixtures("xla_cpu")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.outputs import TokenLogprobs  # noqa: E402
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs  # noqa: E402

NEW_TOKENS = 8
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
_rng = random.Random(7)
PROMPTS = [[_rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 17, 9, 30, 1, 12)]


def _generate(llm: LLM, prompts: list[list[int]],
              params: SamplingParams = GREEDY) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.fixture(scope="module", params=list(tiny_configs()))
def checkpoint(request, tmp_path_factory):
    """(model dir, the CPU platform's greedy tokens for PROMPTS, in one batch)."""
    path = make_checkpoint(tmp_path_factory.mktemp(request.param), tiny_configs()[request.param])
    cpu = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256)
    return path, _generate(cpu, PROMPTS)


def test_batch_of_one(checkpoint) -> None:
    path, expected = checkpoint
    llm = LLM(str(path), dtype="float32", device="tpu", num_kv_blocks=256)
    for prompt, want in zip(PROMPTS[:2], expected[:2]):
        assert _generate(llm, [prompt]) == [want]


def test_mixed_batch_of_six(checkpoint) -> None:
    path, expected = checkpoint
    llm = LLM(str(path), dtype="float32", device="tpu", num_kv_blocks=256)
    assert _generate(llm, PROMPTS) == expected


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])
    cpu = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256)
    return path, cpu


def test_chunked_prefill_and_preemption(llama) -> None:
    """Eight tokens a step (every step is the 8-token bucket) through a 14-block cache."""
    path, cpu = llama
    llm = LLM(str(path), dtype="float32", device="tpu", max_num_batched_tokens=8,
              num_kv_blocks=14, block_size=4)
    assert _generate(llm, PROMPTS) == _generate(cpu, PROMPTS)
    assert llm.engine.core.stats().num_preemptions > 0


def test_seeded_sampling_and_logprobs(llama) -> None:
    path, cpu = llama
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_tokens=NEW_TOKENS,
                            ignore_eos=True, logprobs=2, prompt_logprobs=1)
    llm = LLM(str(path), dtype="float32", device="tpu", num_kv_blocks=256)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]
    got, want = (x.generate(prompts, params, use_tqdm=False) for x in (llm, cpu))
    for g, w in zip(got, want):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids
        for got_lp, want_lp in ((g.prompt_logprobs, w.prompt_logprobs),
                                (g.outputs[0].logprobs, w.outputs[0].logprobs)):
            got_ids, got_values = _flat(got_lp)
            want_ids, want_values = _flat(want_lp)
            assert got_ids == want_ids and got_ids
            assert got_values == pytest.approx(want_values, abs=1e-4)


def _flat(positions: list[TokenLogprobs | None] | None) -> tuple[list[int], list[float]]:
    """The token ids and logprobs of every position, in order."""
    ids: list[int] = []
    values: list[float] = []
    for position in positions or []:
        if position is not None:
            ids += position.token_ids
            values += position.logprobs
    return ids, values
