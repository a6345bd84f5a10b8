"""pagoda-cuda's choice of the layers it fuses (`CudaPlatform.fuse_decode_layer`, on any
machine: the layer's ops swapped for the platform's Triton launchers): by default the layers
with unquantized weights and those of the CUDA C++ INT4 kernel, their norms included;
`PAGODA_CUDA_FUSE_DECODE` picks another mode, and a value it does not know is an error
naming the variable."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda import LLM  # noqa: E402
from pagoda.kernels.triton.decode_layer import TritonDecodeLayer  # noqa: E402
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH  # noqa: E402
from pagoda.models.decode_fusion import DecodeLayerSpec, decode_layer_spec  # noqa: E402
from pagoda_cuda import triton_ops  # noqa: E402
from pagoda_cuda.platform import FUSE_DECODE_ENV, CudaPlatform  # noqa: E402
from pagoda_cuda.triton_ops import KERNELS  # noqa: E402
from tests.engine.fused_layers import decoder_layers  # noqa: E402
from tests.engine.tiny_models import make_checkpoint, wide_llama_config  # noqa: E402


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DecodeLayerSpec]:
    """A dense layer's spec, its ops the CUDA platform's launchers (on the CPU: Triton's
    default launch, no device capability to read)."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(triton_ops, "device_launch", lambda device: DEFAULT_LAUNCH)
    path = make_checkpoint(tmp_path_factory.mktemp("fuse"), wide_llama_config())
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=16, block_size=8)
    found = decode_layer_spec(decoder_layers(llm)[0])
    assert found is not None
    launchers = {lin: dataclasses.replace(getattr(found, lin), op=KERNELS.linear)
                 for lin in ("qkv", "o", "gate_up", "down")}
    yield dataclasses.replace(
        found, rms_norm=KERNELS.rms_norm, fused_add_rms_norm=KERNELS.fused_add_rms_norm,
        rotary_embedding=KERNELS.rotary_embedding, act_and_mul=KERNELS.silu_and_mul,
        **launchers)
    monkeypatch.undo()


@pytest.fixture
def platform(monkeypatch: pytest.MonkeyPatch) -> CudaPlatform:
    """The platform of an sm_90 device (its capability is read when it is made)."""
    monkeypatch.setattr(CudaPlatform, "capability", lambda self, index=0: (9, 0))
    return CudaPlatform()


@pytest.mark.parametrize(("mode", "fuse_norms"),
                         [(None, True), ("dense", True), ("native", True), ("1", True),
                          ("rotary_silu", False)])
def test_modes_that_fuse(platform: CudaPlatform, spec: DecodeLayerSpec, mode: str | None,
                         fuse_norms: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode is None:
        monkeypatch.delenv(FUSE_DECODE_ENV, raising=False)
    else:
        monkeypatch.setenv(FUSE_DECODE_ENV, mode)
    fused = platform.fuse_decode_layer(spec)
    assert isinstance(fused, TritonDecodeLayer) and fused.fuse_norms == fuse_norms


def test_off_and_bad_values(platform: CudaPlatform, spec: DecodeLayerSpec,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FUSE_DECODE_ENV, "0")
    assert platform.fuse_decode_layer(spec) is None
    monkeypatch.setenv(FUSE_DECODE_ENV, "yes")
    with pytest.raises(ValueError, match=f"{FUSE_DECODE_ENV}='yes': expected one of native, dense"):
        platform.fuse_decode_layer(spec)


@pytest.mark.parametrize(("mode", "fused"),
                         [(None, True), ("dense", False), ("native", True), ("1", True)])
def test_layers_of_the_cuda_kernel(platform: CudaPlatform, spec: DecodeLayerSpec,
                                   mode: str | None,
                                   fused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """INT4 linears of the CUDA C++ kernel's provider (their weights prepared for it, in
    bfloat16) fuse with `native` (the default) and `1`, as the kernel's one-row matmuls,
    which compute the norms but rotate nothing."""
    import torch

    from pagoda.quant.rtn import group_weight
    from pagoda_cuda import woq_ops

    def int4(linear):
        weight = group_weight(linear.weight.float(), 4, 128, symmetric=True)
        return dataclasses.replace(linear, op=woq_ops.woq_linear,
                                   weight=woq_ops.prepare_woq(weight, torch.bfloat16))

    quantized = dataclasses.replace(spec, **{lin: int4(getattr(spec, lin))
                                             for lin in ("qkv", "o", "gate_up", "down")})
    if mode is None:
        monkeypatch.delenv(FUSE_DECODE_ENV, raising=False)
    else:
        monkeypatch.setenv(FUSE_DECODE_ENV, mode)
    layer = platform.fuse_decode_layer(quantized)
    if not fused:
        assert layer is None
        return
    assert isinstance(layer, TritonDecodeLayer) and layer.fuse_norms and not layer.rotates
