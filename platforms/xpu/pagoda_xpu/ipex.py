"""intel-extension-for-pytorch (IPEX), when installed: its paged-attention kernels."""

from __future__ import annotations

from typing import Any

from pagoda.platforms.probing import missing_module

IPEX_MODULE = "intel_extension_for_pytorch"


def ipex_unavailable_reason() -> str | None:
    """None when IPEX can be imported here, else why not; cheap (imports nothing)."""
    return missing_module(IPEX_MODULE, "its XPU wheels come from Intel's package index, see "
                                       "https://pytorch-extension.intel.com")


def paged_attention_ops() -> Any:
    """`ipex.llm.modules.PagedAttention`: reshape_and_cache_flash and flash_attn_varlen_func
    over a [blocks, block_size, kv_heads, head_size] cache per keys and values."""
    import intel_extension_for_pytorch as ipex

    return ipex.llm.modules.PagedAttention
