"""AsyncLLM over a real engine-core process: HF-equal greedy tokens, continuous batching,
aborts that free blocks, stop strings, validation, and a core that dies or fails to start."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from pagoda import LLM, SamplingParams
from pagoda.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from pagoda.engine.scheduler_output import EngineCoreOutput
from pagoda.frontend.async_llm import AsyncLLM, EngineDeadError, EngineStartupError
from pagoda.frontend.output_processor import OutputProcessor
from pagoda.outputs import RequestOutput
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs

NEW_TOKENS = 10
_rng = random.Random(7)
PROMPTS = [[_rng.randrange(3, VOCAB) for _ in range(_rng.randrange(1, 24))] for _ in range(24)]


def greedy(max_tokens: int = NEW_TOKENS, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)


def _config(path, **kw) -> EngineConfig:
    return EngineConfig(model=ModelConfig(str(path), dtype="float32"),
                        cache=CacheConfig(block_size=4, num_kv_blocks=96), device="cpu",
                        **kw)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


@pytest.fixture(scope="module")
def expected(model_dir):
    return hf_greedy(model_dir, PROMPTS, NEW_TOKENS)


@pytest.fixture(scope="module", params=[False, True], ids=["sync-steps", "overlapped-steps"])
def engine(model_dir, request):
    """The core steps synchronously (the CPU's default) or overlaps steps as on a GPU:
    streaming, aborts and stop strings must behave the same either way."""
    engine = AsyncLLM(_config(model_dir,
                              scheduler=SchedulerConfig(async_scheduling=request.param)))
    assert engine.info["async_scheduling"] is request.param
    yield engine
    engine.shutdown()


async def _collect(engine: AsyncLLM, prompt, params: SamplingParams, request_id: str,
                   seen_running: list[int] | None = None) -> list[RequestOutput]:
    outputs = []
    async for out in engine.generate(prompt, params, request_id):
        outputs.append(out)
        if seen_running is not None:
            seen_running.append(engine.last_stats.num_running)
    return outputs


def test_greedy_stream_matches_hf_and_the_sync_llm(engine, expected, model_dir):
    llm = LLM(str(model_dir), dtype="float32", device="cpu", num_kv_blocks=96, block_size=4)
    sync = llm.generate([{"prompt_token_ids": p} for p in PROMPTS[:3]], greedy(), use_tqdm=False)
    sampled = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=8, ignore_eos=True)
    (sync_sampled,) = llm.generate(PROMPTS[3], sampled.clone(), use_tqdm=False)

    async def main():
        for i in range(3):
            outs = await _collect(engine, {"prompt_token_ids": PROMPTS[i]}, greedy(), f"seq{i}")
            assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
            # Never more than one output a step; fewer when the reader merges the steps
            # waiting in the pipe (a busy machine may deliver them all at once).
            assert 1 <= len(outs) <= NEW_TOKENS + 1
            tokens = [o.outputs[0].token_ids for o in outs]
            assert all(b[: len(a)] == a and len(b) > len(a)
                       for a, b in zip(tokens, tokens[1:]))  # cumulative, always growing
            final = outs[-1].outputs[0]
            assert final.token_ids == expected[i] and final.finish_reason == "length"
            assert final.text == sync[i].outputs[0].text
        outs = await _collect(engine, PROMPTS[3], sampled.clone(), "n3")
        assert outs[-1].outputs == sync_sampled.outputs

    asyncio.run(asyncio.wait_for(main(), 60))
    assert engine.model_name == str(engine.frontend.source.name) and engine.vocab_size == VOCAB
    assert engine.max_model_len == 96 * 4  # lowered to the KV cache capacity
    assert engine.info["kv_cache_blocks"] == 96


def test_concurrent_requests_batch_and_match(engine, expected):
    before = engine.counters
    seen_running: list[int] = []

    async def main():
        return await asyncio.gather(*(
            _collect(engine, {"prompt_token_ids": p}, greedy(), f"conc{i}", seen_running)
            for i, p in enumerate(PROMPTS)
        ))

    results = asyncio.run(asyncio.wait_for(main(), 60))
    assert [r[-1].outputs[0].token_ids for r in results] == expected
    assert max(seen_running) > 1
    after = engine.counters
    assert after.generation_tokens - before.generation_tokens == len(PROMPTS) * NEW_TOKENS
    assert after.prompt_tokens - before.prompt_tokens == sum(map(len, PROMPTS))
    assert after.finished["length"] - before.finished.get("length", 0) == len(PROMPTS)
    assert engine.num_unfinished_requests == 0


def test_a_slow_consumer_gets_coalesced_outputs(engine, expected):
    """Outputs are cumulative: one the consumer has not taken yet is replaced by a newer
    one, so a consumer that falls behind gets fewer updates, and nothing is lost."""

    async def slow(prompt: list[int], request_id: str) -> list[RequestOutput]:
        outputs = []
        async for out in engine.generate({"prompt_token_ids": prompt}, greedy(), request_id):
            outputs.append(out)
            await asyncio.sleep(0.3)  # several engine steps pass meanwhile
        return outputs

    async def main():
        return await asyncio.gather(*(slow(p, f"slow{i}") for i, p in enumerate(PROMPTS[:2])))

    results = asyncio.run(asyncio.wait_for(main(), 60))
    for outs, want in zip(results, expected, strict=False):
        assert outs[-1].finished and outs[-1].outputs[0].token_ids == want
        assert len(outs) < NEW_TOKENS
        texts = [o.outputs[0].text for o in outs]
        assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))


def _assert_idle(engine: AsyncLLM) -> None:
    stats = asyncio.run(asyncio.wait_for(engine.stats(), 10))
    assert (stats.num_running, stats.num_waiting, stats.kv_cache_usage) == (0, 0, 0.0)
    assert engine.num_unfinished_requests == 0


def test_cancelled_consumer_aborts_and_frees_blocks(engine):
    aborts_before = engine.counters.finished.get("abort", 0)

    async def consume(request_id: str, started: asyncio.Event):
        async for out in engine.generate([5, 6, 7], greedy(300), request_id):
            if len(out.outputs[0].token_ids) >= 2:
                started.set()

    async def main():
        started = asyncio.Event()
        task = asyncio.create_task(consume("cancel-me", started))
        await asyncio.wait_for(started.wait(), 30)
        assert (await engine.stats()).kv_cache_usage > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    _assert_idle(engine)
    assert engine.counters.finished["abort"] == aborts_before + 1


def test_break_and_explicit_abort(engine):
    async def main():
        gen = engine.generate([9, 10], greedy(300), "break-me")
        async for _ in gen:
            break
        await gen.aclose()

        outs = []
        async for out in engine.generate([11, 12], greedy(300), "abort-me"):
            outs.append(out)
            if len(outs) == 2:
                await engine.abort("abort-me")
        return outs

    outs = asyncio.run(asyncio.wait_for(main(), 30))
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
    _assert_idle(engine)


def test_stop_string_stops_the_request_in_the_core(engine, expected):
    stop = engine.tokenizer.decode([expected[0][3]])
    outs = asyncio.run(asyncio.wait_for(
        _collect(engine, {"prompt_token_ids": PROMPTS[0]}, greedy(300, stop=[stop]), "stop"), 30))
    final = outs[-1].outputs[0]
    assert (final.finish_reason, final.stop_reason) == ("stop", stop)
    assert stop not in final.text and len(final.token_ids) < 300
    _assert_idle(engine)


def test_outputs_after_a_front_end_stop_are_ignored(engine):
    """The core may step a child again before it hears that a stop string ended it."""
    inputs = engine.frontend.input_processor(engine.max_model_len)
    prompt = inputs.tokenize([5, 6])
    processor = OutputProcessor(engine.tokenizer)
    processor.add("p", prompt, inputs.make_requests("p", prompt, greedy(8, n=2, stop="w9")))
    _, stopped = processor.process([EngineCoreOutput("p#0", [9]), EngineCoreOutput("p#1", [10])])
    assert stopped == ["p#0"]
    (out,), _ = processor.process([EngineCoreOutput("p#0", [11]), EngineCoreOutput("p#1", [12])])
    assert [c.token_ids for c in out.outputs] == [[9], [10, 12]]
    assert out.outputs[0].finish_reason == "stop" and not out.finished


@pytest.mark.parametrize("stop", [None, "w10"])
def test_steps_processed_together_equal_steps_processed_one_by_one(engine, stop):
    """The reader merges the steps waiting in the pipe into one pass: the request must end
    with the same tokens, text and finish either way, a stop string included."""
    inputs = engine.frontend.input_processor(engine.max_model_len)
    prompt = inputs.tokenize([5, 6])
    steps = [[EngineCoreOutput("p", [9])], [EngineCoreOutput("p", [10])],
             [EngineCoreOutput("p", [11], finish_reason="length")]]

    def processor() -> OutputProcessor:
        p = OutputProcessor(engine.tokenizer)
        p.add("p", prompt, inputs.make_requests("p", prompt, greedy(3, stop=stop)))
        return p

    one_by_one = processor()
    finals = [out for step in steps for out in one_by_one.process(step)[0]]
    together, _ = processor().process([out for step in steps for out in step])
    want, got = finals[-1].outputs[0], together[-1].outputs[0]
    assert (got.token_ids, got.text, got.finish_reason) == (
        want.token_ids, want.text, want.finish_reason)
    assert got.token_ids == ([9, 10] if stop else [9, 10, 11])


@pytest.mark.parametrize("prompt, params, match", [
    ([], greedy(), "empty"),
    ([5, VOCAB], greedy(), "out of range"),
    ([5] * 384, greedy(), "no room"),
    ([5, 6], greedy(383), "max_tokens"),
    ([5, 6], greedy(stop_token_ids=[VOCAB + 1]), "stop_token_ids"),
])
def test_invalid_requests_raise_before_any_output(engine, prompt, params, match):
    async def main():
        with pytest.raises(ValueError, match=match):
            await engine.generate(prompt, params, "bad").__anext__()

    asyncio.run(main())
    assert engine.supervisor.is_healthy and engine.num_unfinished_requests == 0


def test_request_id_in_use(engine):
    async def main():
        first = engine.generate([5, 6], greedy(300), "dup")
        await first.__anext__()
        with pytest.raises(ValueError, match="in use"):
            await engine.generate([5, 6], greedy(), "dup").__anext__()
        await first.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))
    _assert_idle(engine)


def test_stats_call_abandoned_by_a_timeout(engine):
    async def main():
        for _ in range(5):
            with contextlib.suppress(asyncio.TimeoutError):  # usually times out
                await asyncio.wait_for(engine.stats(), 1e-4)
        await asyncio.sleep(0.2)  # its reply arrives after the caller gave up
        return await asyncio.wait_for(engine.stats(), 10)

    assert asyncio.run(main()).num_running == 0
    assert engine.supervisor.is_healthy


def test_killed_core_fails_requests_at_once(model_dir):
    engine = AsyncLLM(_config(model_dir))

    async def consume(request_id: str, started: asyncio.Event):
        async for _ in engine.generate([5, 6, 7], greedy(300), request_id):
            started.set()
            await asyncio.sleep(0.01)  # keep the request in flight for a while

    async def main():
        events = [asyncio.Event() for _ in range(3)]
        tasks = [asyncio.create_task(consume(f"r{i}", e)) for i, e in enumerate(events)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 30)
        killed_at = time.monotonic()
        os.kill(engine.core_pid, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        assert all(isinstance(r, EngineDeadError) for r in results), results
        assert time.monotonic() - killed_at < 5
        assert not engine.supervisor.is_healthy and engine.supervisor.errored
        with pytest.raises(EngineDeadError):
            await engine.generate([5], greedy(), "late").__anext__()
        with pytest.raises(EngineDeadError):
            await asyncio.wait_for(engine.stats(), 5)

    try:
        asyncio.run(main())
    finally:
        engine.shutdown()
        engine.shutdown()  # idempotent


def test_shutdown_fails_requests_in_flight(model_dir):
    engine = AsyncLLM(_config(model_dir))

    async def main():
        gen = engine.generate([5, 6, 7], greedy(300), "r")
        await gen.__anext__()
        engine.shutdown()
        with pytest.raises(EngineDeadError):
            async for _ in gen:
                pass

    asyncio.run(asyncio.wait_for(main(), 30))
    assert not engine.supervisor.is_healthy and not _alive(engine.core_pid)


def test_core_start_up_error_carries_its_traceback(model_dir):
    with pytest.raises(EngineStartupError, match="(?s)no-such-backend.*Traceback"):
        AsyncLLM(EngineConfig(model=ModelConfig(str(model_dir)), device="cpu",
                              attention_backend="no-such-backend"))


_ORPHAN_SCRIPT = """
import os, signal, sys
from pagoda.config import CacheConfig, EngineConfig, ModelConfig
from pagoda.frontend.async_llm import AsyncLLM
engine = AsyncLLM(EngineConfig(model=ModelConfig(sys.argv[1], dtype="float32"),
                               cache=CacheConfig(num_kv_blocks=16), device="cpu"))
print(engine.core_pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_core_exits_when_its_parent_is_killed(model_dir):
    result = subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT, str(model_dir)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    pid = int(result.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
