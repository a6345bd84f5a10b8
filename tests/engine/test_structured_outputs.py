"""Structured outputs on a tiny random model: every sampled sequence follows its grammar.

The tokenizer has single characters and JSON pieces (so a grammar has several spellings of
one text) and fewer tokens than the model's vocabulary (the padded ids must never be
sampled). Each output is replayed through a matcher compiled here, independently of the
engine's: every token must be accepted, a "stop" must end the grammar, a "length" must
be max_tokens long.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import Future

import jsonschema
import pytest
import xgrammar as xgr
from transformers import AutoTokenizer

from pagoda import LLM, SamplingParams
from pagoda.config import SchedulerConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.scheduler import Scheduler
from pagoda.structured import StructuredOutputsParams
from pagoda.structured.engine import RequestGrammar
from tests.engine.helpers import make_request
from tests.engine.tiny_models import (
    CHAR_TOKENS,
    VOCAB,
    hf_greedy,
    make_checkpoint,
    save_char_tokenizer,
    tiny_configs,
)

EOS = 2
SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "n": {"type": "integer", "minimum": -5, "maximum": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "n", "tags", "ok"],
}
GRAMMARS = {
    "json": StructuredOutputsParams(json=SCHEMA),
    "regex": StructuredOutputsParams(regex=r"[a-c]{2,5}(x|yz)"),
    "choice": StructuredOutputsParams(choice=["red", "green", "blue and more"]),
    "grammar": StructuredOutputsParams(grammar='root ::= "(" item ("," item)* ")"\n'
                                               'item ::= [0-9] | "ab" | root'),
    "json_object": StructuredOutputsParams(json_object=True),
    "structural_tag": StructuredOutputsParams(structural_tag={
        "type": "structural_tag",
        "format": {"type": "sequence", "elements": [
            {"type": "tag", "begin": "<n>", "end": "</n>",
             "content": {"type": "json_schema",
                         "json_schema": {"type": "integer", "minimum": 0, "maximum": 99}}},
            {"type": "or", "elements": [{"type": "const_string", "value": " ok"},
                                        {"type": "regex", "pattern": " [xyz]{1,3}!"}]},
        ]},
    }),
}
rng = random.Random(3)
PROMPTS = [[rng.randrange(3, 120) for _ in range(n)] for n in (5, 11, 3)]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])
    assert save_char_tokenizer(path) < VOCAB
    return path


@pytest.fixture(scope="module")
def plain_expected(checkpoint):
    return hf_greedy(checkpoint, PROMPTS, 12)


@pytest.fixture(scope="module")
def compiler(checkpoint):
    info = xgr.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(checkpoint),
                                              vocab_size=VOCAB)
    return xgr.GrammarCompiler(info)


def _llm(path, **options) -> LLM:
    options = {"num_kv_blocks": 256, "block_size": 4, "async_scheduling": False} | options
    return LLM(str(path), dtype="float32", device="cpu", **options)


@pytest.fixture(scope="module")
def llm(checkpoint):
    return _llm(checkpoint)


def _text(token_ids: list[int]) -> str:
    return "".join(CHAR_TOKENS[t - 3] for t in token_ids if t != EOS)


def _check_follows(compiler, grammar: StructuredOutputsParams, completion, max_tokens: int):
    kind, spec = grammar.key
    compiled = {"json": compiler.compile_json_schema, "regex": compiler.compile_regex,
                "grammar": compiler.compile_grammar,
                "structural_tag": compiler.compile_structural_tag}[kind](spec)
    matcher = xgr.GrammarMatcher(compiled, override_stop_tokens=[EOS])
    tokens = completion.token_ids
    for i, token in enumerate(tokens):
        assert matcher.accept_token(token), (kind, i, tokens, _text(tokens))
    if completion.finish_reason == "stop":
        assert tokens[-1] == EOS and matcher.is_terminated(), (kind, tokens)
        if kind == "json":  # a schema, or any object
            jsonschema.validate(json.loads(_text(tokens)), json.loads(spec))
        if grammar.choice:
            assert _text(tokens) in grammar.choice
    else:
        assert completion.finish_reason == "length" and len(tokens) == max_tokens


@pytest.mark.parametrize("kind", sorted(GRAMMARS))
def test_every_sample_follows_the_grammar(llm, compiler, kind):
    grammar = GRAMMARS[kind]
    params = [SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, structured_outputs=grammar)]
    params += [SamplingParams(temperature=t, seed=s, max_tokens=MAX_TOKENS,
                              structured_outputs=grammar)
               for t, s in ((1.0, 0), (1.0, 1), (1.5, 2), (0.7, 3))]
    prompts = [{"prompt_token_ids": p} for p in PROMPTS for _ in params]
    outputs = llm.generate(prompts, params * len(PROMPTS), use_tqdm=False)
    for out in outputs:
        _check_follows(compiler, grammar, out.outputs[0], MAX_TOKENS)
    if kind in ("regex", "choice", "structural_tag"):  # short languages: most samples reach the end
        assert sum(o.outputs[0].finish_reason == "stop" for o in outputs) >= len(outputs) // 2


def test_a_grammar_that_cannot_finish_ends_at_max_tokens(llm, compiler):
    grammar = StructuredOutputsParams(regex="(ab){50}")
    (out,) = llm.generate({"prompt_token_ids": PROMPTS[0]},
                          SamplingParams(max_tokens=7, structured_outputs=grammar), use_tqdm=False)
    assert out.outputs[0].finish_reason == "length"
    _check_follows(compiler, grammar, out.outputs[0], 7)


def _mixed(llm: LLM) -> list:
    """Greedy unstructured and structured requests in one batch."""
    prompts, params = [], []
    for i, prompt in enumerate(PROMPTS):
        prompts += [{"prompt_token_ids": prompt}] * 2
        params += [SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True),
                   SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS,
                                  structured_outputs=GRAMMARS[sorted(GRAMMARS)[i]])]
    return [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)]


@pytest.mark.parametrize("options", [
    {"async_scheduling": True},
    {"num_kv_blocks": 14},  # preemption (recompute) with structured requests running
    {"max_num_batched_tokens": 4},  # chunked prefill
])
def test_mixed_batch(checkpoint, llm, compiler, plain_expected, options):
    reference = _mixed(llm)
    engine = _llm(checkpoint, **options)
    got = _mixed(engine)
    for i in range(len(PROMPTS)):
        assert got[2 * i].token_ids == plain_expected[i]
        _check_follows(compiler, GRAMMARS[sorted(GRAMMARS)[i]], got[2 * i + 1], MAX_TOKENS)
        assert got[2 * i + 1].token_ids == reference[2 * i + 1].token_ids  # greedy: the same
    if "num_kv_blocks" in options:
        assert engine.engine.core.stats().num_preemptions > 0


@pytest.mark.parametrize(("grammar", "message"), [
    ({"json": '{"type": "nonsense"}'}, "structured_outputs.json is not a valid JSON schema"),
    ({"json": {"type": "array", "uniqueItems": True}}, "uniqueItems"),
    ({"regex": "(a"}, "structured_outputs.regex is not a valid regular expression"),
    ({"grammar": "root ::= missing"}, "structured_outputs.grammar is not a valid EBNF"),
    ({"structural_tag": {"type": "structural_tag", "format": {"type": "nope"}}},
     "structured_outputs.structural_tag is not a valid structural tag"),
    ({"structural_tag": {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "a"},
        {"type": "json_schema", "json_schema": {"properties": {"x": {"not": {}}}}}]}}},
     "structural_tag uses a JSON-schema feature .*/format/elements/1/json_schema/properties/x: not"),
])
def test_invalid_grammars_fail_before_the_engine(llm, grammar, message):
    params = SamplingParams(structured_outputs=StructuredOutputsParams(**grammar))
    with pytest.raises(ValueError, match=message):
        llm.generate({"prompt_token_ids": PROMPTS[0]}, params, use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "exactly one of"),
    ({"regex": "a", "choice": ["a"]}, "exactly one of"),
    ({"choice": []}, "structured_outputs.choice must be"),
    ({"json": "[1,"}, "structured_outputs.json is not valid JSON"),
    ({"json": 3}, "structured_outputs.json must be"),
    ({"regex": ""}, "structured_outputs.regex must be"),
    ({"regex": "a", "structural_tag": {"type": "structural_tag"}}, "exactly one of"),
    ({"structural_tag": "{"}, "structured_outputs.structural_tag is not valid JSON"),
    ({"structural_tag": 3}, "structured_outputs.structural_tag must be"),
])
def test_params_validation_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        StructuredOutputsParams(**fields)


def test_a_request_waits_for_its_grammar_without_holding_up_others():
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=64),
                          KVCacheManager(64, 4, False), 512)
    compiling: Future = Future()
    waiting = make_request("structured", [5, 6, 7])
    waiting.grammar = RequestGrammar(compiling, [0])
    scheduler.add_request(waiting)
    scheduler.add_request(make_request("plain", [8, 9]))
    out = scheduler.schedule()
    assert [item.request_id for item in out.scheduled] == ["plain"]
    assert scheduler.waiting == [waiting]


def test_overlapped_steps_get_their_bitmask_after_launch(checkpoint, llm, compiler):
    """With steps overlapping, a structured request is not held back: its step is launched
    while the one before is in flight and gets its bitmask once that one is read back; the
    tokens are those of the engine that never overlaps."""
    engine = _llm(checkpoint, async_scheduling=True)
    executor = engine.engine.core.executor
    provided = []
    original = executor.provide_token_bitmask

    def provide(bitmask):  # counts the late bitmasks on the real executor
        provided.append(bitmask)
        return original(bitmask)

    executor.provide_token_bitmask = provide
    reference, got = _mixed(llm), _mixed(engine)
    assert len(provided) >= MAX_TOKENS  # (about one per decode step)
    assert [c.token_ids for c in got] == [c.token_ids for c in reference]
    for i in range(len(PROMPTS)):
        _check_follows(compiler, GRAMMARS[sorted(GRAMMARS)[i]], got[2 * i + 1], MAX_TOKENS)


def test_pipeline_stages_in_worker_processes(checkpoint, llm, compiler):
    """The bitmask crosses to worker processes with the step; two steps in flight."""
    engine = _llm(checkpoint, pipeline_parallel_size=2, num_kv_blocks=64)
    try:
        assert engine.engine.core.depth == 1
        reference, got = _mixed(llm), _mixed(engine)
        for i in range(len(PROMPTS)):
            _check_follows(compiler, GRAMMARS[sorted(GRAMMARS)[i]], got[2 * i + 1], MAX_TOKENS)
        assert [c.token_ids for c in got] == [c.token_ids for c in reference]
    finally:
        engine.engine.shutdown()


def test_a_grammar_the_engine_cannot_compile_aborts_only_its_request(llm):
    """Past the front end's check (a request straight to the core), a failed compilation
    ends its request with "abort"; the others finish."""
    core = llm.engine.core
    broken = make_request("broken", PROMPTS[0], max_tokens=4,
                          structured_outputs=StructuredOutputsParams(regex="(a"))
    core.add_request(broken)
    core.add_request(make_request("fine", PROMPTS[1], max_tokens=4))
    finished = {}
    while core.has_unfinished_requests():
        for out in core.step():
            if out.finish_reason:
                finished[out.request_id] = out.finish_reason
    assert finished == {"broken": "abort", "fine": "length"}
