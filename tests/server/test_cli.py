"""`pagoda chat`, `pagoda complete` and `pagoda bench serve` against a live server, and
`pagoda run-batch` offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.server.conftest import CHAT_TEMPLATE, MODEL
from tests.server.openai_spec import validate

LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+: ",
                      re.MULTILINE)
"""A line in Pagoda's log format (pagoda.logs.LOG_FORMAT)."""


def pagoda(*args: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGODA_")}
    return subprocess.run([sys.executable, "-m", "pagoda.cli.main", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=env)


def _client_args(server) -> list[str]:
    return ["--url", server.url, "--api-key", server.api_key]


def _answer(server, path: str, body: dict) -> dict:
    response = httpx.post(f"{server.url}{path}", headers=server.headers, timeout=30,
                          json={"model": MODEL, "temperature": 0.0, "max_tokens": 4, **body})
    return response.json()["choices"][0]


def test_chat_repl(server):
    first = _answer(server, "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "w10 w11"}]})["message"]["content"]
    second = _answer(server, "/v1/chat/completions", {"messages": [
        {"role": "user", "content": "w10 w11"}, {"role": "assistant", "content": first},
        {"role": "user", "content": "w12"}]})["message"]["content"]
    result = pagoda("chat", *_client_args(server), "--max-tokens", "4", "--temperature", "0",
                    stdin="w10 w11\nw12\n/exit\n")
    assert result.returncode == 0, result.stderr
    assert f"Chatting with {MODEL}" in result.stdout
    assert first in result.stdout and second in result.stdout
    # Only the conversation: no log lines (httpx logs each request at INFO) between turns.
    assert not LOG_LINE.search(result.stdout + result.stderr), result.stderr


def test_complete(server):
    expected = _answer(server, "/v1/completions", {"prompt": "w5 w17"})["text"]
    result = pagoda("complete", "w5 w17", *_client_args(server), "--max-tokens", "4",
                    "--temperature", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected.strip()
    refused = pagoda("complete", "w5", "--url", server.url, "--api-key", "wrong")
    assert refused.returncode != 0 and "API key" in refused.stderr


def test_bench_serve(server, tmp_path):
    out = tmp_path / "bench.json"
    result = pagoda("bench", "serve", *_client_args(server), "--num-prompts", "8",
                    "--input-len", "16", "--output-len", "8", "--request-rate", "100",
                    "--max-concurrency", "4", "--output-json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Request throughput" in result.stdout and "TTFT" in result.stdout
    report = json.loads(out.read_text())
    assert (report["completed"], report["failed"]) == (8, 0)
    assert report["total_output_tokens"] == 64 and report["total_input_tokens"] == 128
    for key in ("ttft_ms", "tpot_ms", "itl_ms"):
        assert {"mean", "median", "p99"} <= set(report[key])
    # The server's processes, from its /metrics: the engine core holds the model.
    memory = report["server_memory"]
    assert set(memory) == {"frontend", "engine_core_0"}
    for sizes in memory.values():
        assert 0 < sizes["resident_bytes"] <= sizes["peak_resident_bytes"]
    assert "Peak resident memory, engine_core_0:" in result.stdout


def test_run_batch(tiny_model: Path, tmp_path: Path):
    template = tmp_path / "template.jinja"
    template.write_text(CHAT_TEMPLATE)
    lines = [
        {"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": MODEL, "messages": [{"role": "user", "content": "w5 w6"}],
                  "max_tokens": 3}},
        {"custom_id": "completion", "method": "POST", "url": "/v1/completions",
         "body": {"model": MODEL, "prompt": "w5 w6", "max_tokens": 3}},
        {"custom_id": "bad", "method": "POST", "url": "/v1/completions",
         "body": {"model": MODEL, "prompt": "w5", "frobnicate": True}},
        {"custom_id": "wrong-url", "method": "POST", "url": "/v1/embeddings", "body": {}},
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("\n".join(json.dumps(line) for line in lines) + "\n{not json\n")
    results_file = tmp_path / "results.jsonl"
    result = pagoda("run-batch", "-i", str(requests), "-o", str(results_file), str(tiny_model),
                    "--dtype", "float32", "--device", "cpu", "--kv-cache-memory", "1MiB",
                    "--served-model-name", MODEL, "--chat-template", str(template))
    assert result.returncode == 0, result.stderr
    assert "2 of 5 requests succeeded" in result.stdout
    results = {r["custom_id"]: r for r in map(json.loads, results_file.read_text().splitlines())}
    assert set(results) == {"chat", "completion", "bad", "wrong-url", None}
    chat, completion, bad, wrong_url, broken = (
        results[i] for i in ("chat", "completion", "bad", "wrong-url", None))
    assert chat["response"]["status_code"] == 200 and chat["error"] is None
    validate("CreateChatCompletionResponse", chat["response"]["body"])
    validate("CreateCompletionResponse", completion["response"]["body"])
    assert bad["response"]["status_code"] == 400
    assert "frobnicate" in bad["response"]["body"]["error"]["message"]
    assert wrong_url["response"] is None and "url" in wrong_url["error"]["message"]
    assert broken["error"]["code"] == "invalid_json"


def test_run_batch_resumes_where_it_stopped(tiny_model: Path, tmp_path: Path):
    """A re-run keeps the results that stand, retries server errors, drops a cut last line
    and runs the rest; each custom_id ends with exactly one result."""
    body = {"model": MODEL, "prompt": "w5 w6", "max_tokens": 3}
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}
             for i in range(4)]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    results_file = tmp_path / "results.jsonl"
    kept = {"id": "batch_req_x", "custom_id": "r0", "error": None,
            "response": {"status_code": 200, "request_id": "req_x", "body": {"kept": True}}}
    failed = {**kept, "custom_id": "r1", "response": {"status_code": 503, "body": {}}}
    results_file.write_text(json.dumps(kept) + "\n" + json.dumps(failed) + "\n"
                            + '{"id": "batch_req_y", "custom_id": "r2", "resp')  # cut short
    args = ["-i", str(requests), "-o", str(results_file), str(tiny_model), "--dtype",
            "float32", "--device", "cpu", "--kv-cache-memory", "1MiB", "--served-model-name",
            MODEL]
    result = pagoda("run-batch", *args)
    assert result.returncode == 0, result.stderr
    assert "Resuming: 1 of 4" in result.stdout and "3 of 3 requests succeeded" in result.stdout
    results = [json.loads(line) for line in results_file.read_text().splitlines()]
    assert sorted(r["custom_id"] for r in results) == ["r0", "r1", "r2", "r3"]
    by_id = {r["custom_id"]: r for r in results}
    assert by_id["r0"]["response"]["body"] == {"kept": True}  # not run again
    for i in ("r1", "r2", "r3"):
        validate("CreateCompletionResponse", by_id[i]["response"]["body"])
    again = pagoda("run-batch", *args)
    assert "Resuming: 4 of 4" in again.stdout and "0 of 0 requests" in again.stdout
    assert results_file.read_text().count("\n") == 4
    requests.write_text(requests.read_text() + json.dumps(lines[0]) + "\n")
    twice = pagoda("run-batch", *args)
    assert twice.returncode != 0 and "custom_id must be unique" in twice.stderr


def test_serve_refuses_bad_options_and_unusable_devices_at_once(tiny_model: Path):
    """Before any model or engine process starts: a clear message, no traceback."""
    bad = pagoda("serve", str(tiny_model), "--gpu-memory-utilization", "1.5", timeout=60)
    assert bad.returncode != 0 and "gpu_memory_utilization must be in (0, 1]" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = pagoda("serve", str(tiny_model), "--device", "cuda", timeout=60)
    assert missing.returncode != 0 and "pagoda serve: error:" in missing.stderr
    assert "cuda" in missing.stderr and "Traceback" not in missing.stderr


def test_log_lines_carry_their_time():
    """LOG_LINE (which the tests above look for) matches a line of Pagoda's format, and the
    line carries its wall-clock time to the millisecond."""
    import logging

    from pagoda.logs import DATE_FORMAT, LOG_FORMAT

    record = logging.LogRecord("pagoda.worker", logging.INFO, __file__, 1, "Loaded", None, None)
    line = logging.Formatter(LOG_FORMAT, DATE_FORMAT).format(record)
    assert LOG_LINE.match(line), line
    assert re.search(r" \d\d:\d\d:\d\d\.\d{3} ", line)
