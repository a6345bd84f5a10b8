"""`pagoda plugins --model M` / `--architecture A`: which implementation runs a model with
each model_impl (Pagoda's own class or the transformers fallback), or why none can."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import GPTNeoXConfig

from pagoda.cli.main import main


def test_a_model_directory_without_a_native_class_takes_the_fallback(tmp_path: Path,
                                                                     capsys) -> None:
    GPTNeoXConfig(architectures=["GPTNeoXForCausalLM"]).save_pretrained(tmp_path)
    assert main(["plugins", "--model", str(tmp_path)]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == f"{tmp_path} (GPTNeoXForCausalLM):"
    assert ("model_impl auto:         transformers fallback: transformers.GPTNeoXForCausalLM "
            "through pagoda.models.hf_fallback:TransformersForCausalLM") in lines
    assert any(line.startswith("model_impl pagoda:       cannot run: ") for line in lines)


def test_an_architecture_by_name_as_json(capsys) -> None:
    assert main(["plugins", "--architecture", "LlamaForCausalLM", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["auto"] == report["pagoda"] == {
        "runs": "native: pagoda.models.llama:LlamaForCausalLM"}
    assert report["transformers"]["runs"].startswith("transformers fallback: ")


def test_an_architecture_nothing_runs_exits_1_saying_why(capsys) -> None:
    assert main(["plugins", "--architecture", "GPTNeoForCausalLM"]) == 1
    assert "does not support the attention interface" in capsys.readouterr().out
