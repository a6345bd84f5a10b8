"""Option values as the user may give them: dtypes by name or alias, sizes in bytes with
units, chat templates as text or a file; each parsed or refused with the field's name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

if TYPE_CHECKING:
    import torch

_DTYPE_ALIASES = {
    "float32": "float32", "float": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "half": "float16", "fp16": "float16",
}
_KV_CACHE_DTYPE_ALIASES = {"fp8": "fp8", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8"}
"""Cache-only dtypes: fp8 is e4m3 (torch.float8_e4m3fn) with a scale per layer for keys and
for values."""


def dtype_name(dtype: str | torch.dtype) -> str:
    """"auto", "float32", "bfloat16" or "float16" for a dtype option (a torch.dtype, or a
    name or alias such as "bf16" or "half"); ValueError for anything else."""
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name != "auto" and name not in _DTYPE_ALIASES:
        raise ValueError(f"dtype must be auto or one of {sorted(_DTYPE_ALIASES)}, got {dtype!r}")
    return _DTYPE_ALIASES.get(name, name)


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype | None:
    """A torch dtype, or None for "auto" (the platform decides)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype_name(dtype)
    return None if name == "auto" else getattr(torch, name)


def kv_cache_dtype_name(dtype: str | torch.dtype) -> str:
    """A model dtype's name (see `dtype_name`), or "fp8" for "fp8", "fp8_e4m3" or
    torch.float8_e4m3fn."""
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name in _KV_CACHE_DTYPE_ALIASES:
        return _KV_CACHE_DTYPE_ALIASES[name]
    try:
        return dtype_name(dtype)
    except ValueError:
        choices = sorted({*_DTYPE_ALIASES, *_KV_CACHE_DTYPE_ALIASES})
        raise ValueError(f"kv_cache_dtype must be auto or one of {choices}, "
                         f"got {dtype!r}") from None


def parse_kv_cache_dtype(dtype: str | torch.dtype) -> torch.dtype | None:
    """The KV cache's torch dtype (fp8: torch.float8_e4m3fn), or None for "auto" (the
    model's)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = kv_cache_dtype_name(dtype)
    return torch.float8_e4m3fn if name == "fp8" else parse_dtype(name)


def parse_bytes(text: str) -> int:
    """"4GiB", "512MB", "1e9" or a plain number of bytes."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    s = text.strip().lower().removesuffix("b")
    suffix = next((u for u in sorted(units, key=len, reverse=True) if s.endswith(u)), "")
    try:
        return int(float(s.removesuffix(suffix)) * units.get(suffix, 1))
    except ValueError:
        raise ValueError(f"expected a number of bytes such as 2GiB, 512MB or 1e9, "
                         f"got {text!r}") from None


ByteSize = Annotated[int, parse_bytes]
"""A number of bytes; on the command line also "2GiB", "512MB" or "1e9"."""


def read_chat_template(template: str) -> str:
    """Jinja text as given; anything without a "{" is the path of a file holding one."""
    if "{" in template:
        return template
    try:
        with open(template) as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"chat_template {template!r} is neither a Jinja template nor a "
                         f"readable file ({exc.strerror})") from None
