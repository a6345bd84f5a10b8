"""Choosing a quantization method: registry, platform support, checkpoint format."""

from __future__ import annotations

import pytest

from pagoda import LLM
from pagoda.platforms import resolve_platform
from pagoda.quant import UnquantizedMethod
from pagoda.quant.selector import QuantMethodError, select_quant_method
from tests.engine.tiny_models import make_checkpoint, tiny_configs

pytest.importorskip("pagoda_cpu")
from pagoda_cpu.quant_gguf import GGUFInt4Method  # noqa: E402


def test_cpu_resolves_gguf_and_none():
    cpu = resolve_platform("cpu")
    assert isinstance(select_quant_method(cpu, "gguf"), GGUFInt4Method)
    assert isinstance(select_quant_method(cpu, None), UnquantizedMethod)
    assert isinstance(select_quant_method(cpu, "none"), UnquantizedMethod)


def test_unknown_method_lists_the_registered_ones():
    with pytest.raises(QuantMethodError, match=r"Unknown quantization method 'awq'.*gguf"):
        select_quant_method(resolve_platform("cpu"), "awq")


def test_gguf_on_the_template_platform_is_refused():
    with pytest.raises(QuantMethodError, match=(
            r"'gguf' is not supported on platform 'template' \(supported there: none\)")):
        LLM("smollm2-135m-instruct", device="template", quantization="gguf")


def test_gguf_with_an_hf_checkpoint_is_refused(tmp_path):
    path = make_checkpoint(tmp_path / "llama", tiny_configs()["llama"])
    with pytest.raises(ValueError, match=r"'gguf' reads gguf checkpoints only, not .*\(hf\)"):
        LLM(str(path), device="cpu", quantization="gguf")
    with pytest.raises(ValueError, match="not dummy weights"):
        LLM(str(path), device="cpu", quantization="gguf", load_format="dummy")
