"""Each command's own options are one dataclass: every field a flag with its docstring as
help, parsed back into the dataclass (serve, run-batch, bench, chat, complete, bench serve)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from pagoda.bench.config import LatencyConfig, ThroughputConfig
from pagoda.cli.dataclass_args import dataclass_from_args
from pagoda.cli.main import build_parser, main
from pagoda.config.fields import flat_fields
from pagoda_server.cli.bench_serve import ServingBenchConfig
from pagoda_server.cli.chat import ChatConfig
from pagoda_server.cli.client import ClientConfig
from pagoda_server.cli.complete import CompleteConfig
from pagoda_server.cli.run_batch import RunBatchConfig
from pagoda_server.config import ChatFormatConfig, ServerConfig

CLIENT = (["--url", "http://h:1", "--api-key", "k", "--model", "m"],
          ClientConfig("http://h:1", "k", "m"))
WORKLOAD = ["--input-len", "3", "--output-len", "4", "--range-ratio", "0.5",
            "--output-json", "out.json"]
# command words, its options (every field other than its default), what they parse to
CASES = {
    "serve": (["serve", "--host", "0.0.0.0", "--port", "9000", "--api-key", "k1",
               "--api-key", "k2", "--log-level", "debug", "--tool-call-parser", "mistral",
               "--reasoning-parser", "qwen3", "--lora-modules", "a=/x", "--lora-modules", "b=/y",
               "--max-request-body-bytes", "1000", "--shutdown-timeout", "2.5",
               "--request-timeout", "30", "--restart-engine"],
              [ServerConfig("0.0.0.0", 9000, ["k1", "k2"], "debug", ["a=/x", "b=/y"], 1000,
                            2.5, 30.0, True),
               ChatFormatConfig("mistral", "qwen3")]),
    "run-batch": (["run-batch", "-i", "in.jsonl", "--output-file", "out.jsonl",
                   "--max-concurrency", "3", "--tool-call-parser", "none",
                   "--reasoning-parser", "deepseek_r1"],
                  [RunBatchConfig("in.jsonl", "out.jsonl", 3),
                   ChatFormatConfig("none", "deepseek_r1")]),
    "bench throughput": (["bench", "throughput", *WORKLOAD, "--backend", "pagoda,hf",
                          "--temperature", "0.5", "--hf-batch-size", "2", "--hf-cache", "static",
                          "--structured-output",
                          "json-schema", "--num-prompts", "5", "--num-warmup-prompts", "0"],
                         [ThroughputConfig(3, 4, 0.5, "out.json", "pagoda,hf", 0.5, 2,
                                           "static", "json-schema", 5, 0)]),
    "bench latency": (["bench", "latency", *WORKLOAD, "--backend", "hf", "--temperature", "1",
                       "--hf-batch-size", "2", "--hf-cache", "static",
                       "--structured-output", "json-schema", "--batch-size", "2",
                       "--num-iters", "3", "--num-iters-warmup", "0"],
                      [LatencyConfig(3, 4, 0.5, "out.json", "hf", 1.0, 2, "static", "json-schema",
                                     2, 3, 0)]),
    "chat": (["chat", *CLIENT[0], "--system", "be brief", "--max-tokens", "9",
              "--temperature", "0"],
             [CLIENT[1], ChatConfig("be brief", 9, 0.0)]),
    "complete": (["complete", "a prompt", *CLIENT[0], "--max-tokens", "9", "--temperature", "0"],
                 [CLIENT[1], CompleteConfig("a prompt", 9, 0.0)]),
    "bench serve": (["bench", "serve", *CLIENT[0], *WORKLOAD, "--num-prompts", "5",
                     "--request-rate", "2.5", "--max-concurrency", "2", "--seed", "1"],
                    [CLIENT[1], ServingBenchConfig(3, 4, 0.5, "out.json", "random", 5, 2.5, 2,
                                                   1)]),
}


@pytest.mark.parametrize("command", CASES)
def test_every_field_is_a_flag_and_parses_back(command: str) -> None:
    argv, expected = CASES[command]
    args = build_parser().parse_args(argv)
    for config in expected:
        assert dataclass_from_args(type(config), args) == config
        defaults = {f.name: f.default() for f in flat_fields(type(config)).values()}
        unchanged = [f.name for f in dataclasses.fields(config)
                     if f.name != "dataset" and getattr(config, f.name) == defaults[f.name]]
        assert unchanged == [], f"{type(config).__name__}: no non-default value for {unchanged}"


@pytest.mark.parametrize("command", CASES)
def test_help_is_each_field_docstring(command: str, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main([*command.split(), "--help"])
    shown = capsys.readouterr().out
    for config in CASES[command][1]:
        for name, f in flat_fields(type(config)).items():
            assert f.help and " ".join(f.help.split()) in shown, name


@pytest.mark.parametrize("command", CASES)
def test_one_commands_parser_parses_as_the_whole(command: str) -> None:
    """main builds only the named command's arguments: the same parse."""
    argv = CASES[command][0]
    assert vars(build_parser(argv[0]).parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_a_command_loads_no_other_commands_modules() -> None:
    """`pagoda plugins` (as `pagoda serve` would) builds its own arguments only: the client
    commands' modules (httpx, aiohttp) stay unimported."""
    code = ("import sys\n"
            "from pagoda.cli.main import main\n"
            "assert main(['plugins']) == 0\n"
            "loaded = [m for m in ('pagoda_server.cli.client', 'pagoda_server.cli.bench_serve',"
            " 'aiohttp') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_api_keys_from_flags_and_environment(monkeypatch) -> None:
    monkeypatch.setenv("PAGODA_API_KEY", "e1, e2")
    assert ServerConfig(api_key=["k"]).accepted_api_keys() == ["k", "e1", "e2"]
    assert ClientConfig().key() == "e1" and ClientConfig(api_key="k").key() == "k"


@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--tool-call-parser", "xml"], "tool_call_parser must be one of auto, none"),
    (["run-batch", "-i", "a", "-o", "b", "--reasoning-parser", "r2"],
     "reasoning_parser must be one of"),
    (["serve", "--request-timeout", "0"], "request_timeout must be > 0"),
    (["serve", "--shutdown-timeout", "-1"], "shutdown_timeout must be >= 0"),
])
def test_bad_options_fail_before_anything_loads(argv, message, capsys) -> None:
    with pytest.raises(SystemExit, match=message):
        main(argv)
