"""One source for the engine options: every leaf field of EngineConfig is a flag of each
command that builds an engine, with its docstring as help, and a keyword of
`EngineConfig.from_kwargs` / `LLM(...)`; both give the same config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pagoda.cli.dataclass_args import dataclass_from_args
from pagoda.cli.engine_args import engine_config
from pagoda.cli.main import build_parser, main
from pagoda.config import (
    CacheConfig,
    EngineConfig,
    LoRAConfig,
    ModelConfig,
    ParallelConfig,
    PoolerConfig,
    SchedulerConfig,
    SpeculativeConfig,
)
from pagoda.config.fields import field_docs, flat_fields, flat_values, from_flat
from pagoda.platforms.selection import DeviceError

pytestmark = pytest.mark.usefixtures("fresh_registries")

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

# flat name -> (a value other than the default, the command-line words that give it)
NON_DEFAULTS: dict[str, tuple[object, list[str]]] = {
    "model": ("org/some-model", ["org/some-model"]),
    "tokenizer": ("org/some-tokenizer", ["--tokenizer", "org/some-tokenizer"]),
    "dtype": ("bfloat16", ["--dtype", "bfloat16"]),
    "load_format": ("dummy", ["--load-format", "dummy"]),
    "max_model_len": (512, ["--max-model-len", "512"]),
    "seed": (7, ["--seed", "7"]),
    "served_model_name": (["a", "b", "c"], ["--served-model-name", "a",
                                            "--served-model-name", "b,c"]),
    "generation_config": ("pagoda", ["--generation-config", "pagoda"]),
    "chat_template": (TEMPLATE, ["--chat-template", TEMPLATE]),
    "quantization": ("gguf", ["--quantization", "gguf"]),
    "runner": ("generate", ["--runner", "generate"]),
    "model_impl": ("transformers", ["--model-impl", "transformers"]),
    "block_size": (32, ["--block-size", "32"]),
    "kv_cache_memory": (2 * 2**30, ["--kv-cache-memory", "2GiB"]),
    "memory_fraction": (0.5, ["--memory-fraction", "0.5"]),
    "gpu_memory_utilization": (0.8, ["--gpu-memory-utilization", "0.8"]),
    "kv_cache_dtype": ("float16", ["--kv-cache-dtype", "float16"]),
    "enable_prefix_caching": (False, ["--no-enable-prefix-caching"]),
    "num_kv_blocks": (100, ["--num-kv-blocks", "100"]),
    "max_num_seqs": (8, ["--max-num-seqs", "8"]),
    "max_num_batched_tokens": (512, ["--max-num-batched-tokens", "512"]),
    "scheduling_policy": ("priority", ["--scheduling-policy", "priority"]),
    "enable_chunked_prefill": (False, ["--no-enable-chunked-prefill"]),
    "async_scheduling": (False, ["--no-async-scheduling"]),
    "max_waiting_requests": (10, ["--max-waiting-requests", "10"]),
    "tensor_parallel_size": (2, ["--tensor-parallel-size", "2"]),
    "pipeline_parallel_size": (2, ["--pipeline-parallel-size", "2"]),
    "data_parallel_size": (2, ["--data-parallel-size", "2"]),
    "enable_expert_parallel": (True, ["--enable-expert-parallel"]),
    "pooling": ("cls", ["--pooling", "cls"]),
    "normalize_embeddings": (False, ["--no-normalize-embeddings"]),
    "speculative_method": ("draft", ["--speculative-method", "draft"]),
    "num_speculative_tokens": (5, ["--num-speculative-tokens", "5"]),
    "prompt_lookup_min": (2, ["--prompt-lookup-min", "2"]),
    "prompt_lookup_max": (6, ["--prompt-lookup-max", "6"]),
    "speculative_model": ("draft-dir", ["--speculative-model", "draft-dir"]),
    "speculative_dtype": ("float16", ["--speculative-dtype", "fp16"]),
    "speculative_quantization": ("fp8", ["--speculative-quantization", "fp8"]),
    "speculative_disable_by_batch_size": (4, ["--speculative-disable-by-batch-size", "4"]),
    "enable_lora": (True, ["--enable-lora"]),
    "max_loras": (4, ["--max-loras", "4"]),
    "max_lora_rank": (64, ["--max-lora-rank", "64"]),
    "max_cpu_loras": (8, ["--max-cpu-loras", "8"]),
    "device": ("template", ["--device", "template"]),
    "attention_backend": ("reference", ["--attention-backend", "reference"]),
    "distributed_executor_backend": ("mp", ["--distributed-executor-backend", "mp"]),
    "enforce_eager": (True, ["--enforce-eager"]),
    "graph_batch_sizes": ([1, 2, 8], ["--graph-batch-sizes", "1,2,8"]),
}
VALUES = {name: value for name, (value, _) in NON_DEFAULTS.items()}
ARGV = [word for _, words in NON_DEFAULTS.values() for word in words]
ENGINE_COMMANDS = {
    "serve": ["serve"],
    "bench throughput": ["bench", "throughput"],
    "bench latency": ["bench", "latency"],
    "run-batch": ["run-batch", "-i", "requests.jsonl", "-o", "results.jsonl"],
}


def test_every_field_has_a_unique_flat_name_and_a_non_default_here() -> None:
    sections = (ModelConfig, CacheConfig, SchedulerConfig, ParallelConfig, PoolerConfig,
                SpeculativeConfig, LoRAConfig)
    leaves = [f.name for c in sections for f in dataclasses.fields(c)] + [
        f.name for f in dataclasses.fields(EngineConfig)
        if f.name not in ("model", "cache", "scheduler", "parallel", "pooler", "speculative",
                          "lora")]
    assert len(set(leaves)) == len(leaves) == len(flat_fields(EngineConfig))
    assert list(NON_DEFAULTS) == list(flat_fields(EngineConfig))
    defaults = flat_values(EngineConfig())
    assert [n for n, value in VALUES.items() if defaults[n] == value] == []


@dataclasses.dataclass
class Inner:
    seed: int = 0


@dataclasses.dataclass
class Outer:
    inner: Inner = dataclasses.field(default_factory=Inner)
    seed: int = 1


def test_a_shared_flat_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"inner.seed and seed share the flat name 'seed'"):
        flat_fields(Outer)


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_every_field_is_a_flag_of_each_engine_command(command: str) -> None:
    args = build_parser().parse_args([*ENGINE_COMMANDS[command], *ARGV])
    config = dataclass_from_args(EngineConfig, args)
    assert flat_values(config) == VALUES
    assert config == EngineConfig.from_kwargs(**VALUES)


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_defaults_come_from_the_dataclasses(command: str) -> None:
    args = build_parser().parse_args(ENGINE_COMMANDS[command])
    assert dataclass_from_args(EngineConfig, args) == EngineConfig()


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_help_is_each_field_docstring(command: str, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: the docstring unbroken
    with pytest.raises(SystemExit):
        main([*command.split(), "--help"])
    shown = capsys.readouterr().out
    for name, f in flat_fields(EngineConfig).items():
        assert f.help, f"{name} has no docstring"
        assert " ".join(f.help.split()) in shown, name


def test_docstrings_are_read_from_the_source() -> None:
    docs = field_docs(SchedulerConfig)
    assert docs["max_num_seqs"] == "Most sequences in one step."
    assert docs["async_scheduling"].startswith("Schedule step N+1 while the device runs")


def test_flat_values_build_the_same_config() -> None:
    config = EngineConfig.from_kwargs(**VALUES)
    assert from_flat(EngineConfig, flat_values(config)) == config


def test_unknown_keyword_names_the_closest() -> None:
    from pagoda import LLM

    with pytest.raises(TypeError, match=r"'max_num_seq' \(did you mean 'max_num_seqs'"):
        LLM(max_num_seq=4)
    with pytest.raises(TypeError, match=r"'schedule_policy' \(did you mean 'scheduling_policy'"):
        EngineConfig.from_kwargs(schedule_policy="priority")
    with pytest.raises(TypeError, match=r"'frobnicate'$"):
        EngineConfig.from_kwargs(frobnicate=1)


def test_bad_values_fail_at_config_time(capsys) -> None:
    with pytest.raises(ValueError, match="load_format must be one of 'auto', 'safetensors'"):
        EngineConfig.from_kwargs(load_format="pickle")
    with pytest.raises(ValueError, match="dtype must be auto or one of"):
        EngineConfig.from_kwargs(dtype="int3")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--scheduling-policy", "lifo"])
    assert "invalid choice: 'lifo'" in capsys.readouterr().err


def test_unknown_or_unusable_device_fails_at_config_time() -> None:
    with pytest.raises(DeviceError, match="pip install pagoda-acme"):
        EngineConfig.from_kwargs(device="acme")
    with pytest.raises(DeviceError, match="Device 'cuda' is installed but not usable here"):
        EngineConfig.from_kwargs(device="cuda")


def test_device_is_resolved_once_to_the_platform_name(monkeypatch) -> None:
    assert EngineConfig().device == "cpu"  # auto: the best usable
    assert EngineConfig.from_kwargs(device=" AUTO ").device == "cpu"
    monkeypatch.setenv("PAGODA_DEVICE", "template")
    assert EngineConfig().device == "template"
    monkeypatch.setenv("PAGODA_DEVICE", "acme")
    with pytest.raises(DeviceError, match="pagoda-acme"):
        EngineConfig()


def test_chat_template_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "template.jinja"
    path.write_text(TEMPLATE)
    assert EngineConfig.from_kwargs(chat_template=str(path)).model.chat_template == TEMPLATE
    args = build_parser().parse_args(["serve", "--chat-template", str(path)])
    assert dataclass_from_args(EngineConfig, args).model.chat_template == TEMPLATE
    with pytest.raises(ValueError, match="neither a Jinja template nor a readable file"):
        EngineConfig.from_kwargs(chat_template=str(tmp_path / "missing.jinja"))


def test_python_spellings_are_normalized() -> None:
    import torch

    config = EngineConfig.from_kwargs(dtype=torch.float16, kv_cache_dtype="bf16",
                                      served_model_name="one")
    assert (config.model.dtype, config.cache.kv_cache_dtype) == ("float16", "bfloat16")
    assert config.model.served_model_name == ["one"]


def test_sizes_as_text_are_parsed_for_keywords_as_for_flags() -> None:
    """A field with a text parser (a size such as 2GiB) takes the same text as a keyword
    as on the command line; text it cannot parse is refused naming the field."""
    args = build_parser().parse_args(["serve", "--kv-cache-memory", "2GiB"])
    flag = dataclass_from_args(EngineConfig, args).cache.kv_cache_memory
    assert EngineConfig.from_kwargs(kv_cache_memory="2GiB").cache.kv_cache_memory == flag
    assert flag == 2 * 2**30
    with pytest.raises(ValueError, match="kv_cache_memory: expected a number of bytes"):
        EngineConfig.from_kwargs(kv_cache_memory="lots")


def test_list_flags_are_comma_separated_and_repeatable() -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--graph-batch-sizes", "1,x"])
    args = parser.parse_args(["serve", "--graph-batch-sizes", "4", "--graph-batch-sizes", "8"])
    assert args.graph_batch_sizes == [4, 8]


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_the_model_may_be_given_as_an_option(command: str) -> None:
    parser = build_parser()
    args = parser.parse_args([*ENGINE_COMMANDS[command], "--model", "org/some-model"])
    assert engine_config(args).model.model == "org/some-model"
    twice = parser.parse_args([*ENGINE_COMMANDS[command], "org/a", "--model", "org/b"])
    with pytest.raises(SystemExit, match="the model is given twice"):
        engine_config(twice)
