"""GGUFModel: one GGUF file as an HF config, HF-named weights and a tokenizer."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from pagoda.gguf.config import arch_spec, build_config
from pagoda.gguf.dequant import dequantize, torch_shape
from pagoda.gguf.fields import GGUFMetadata
from pagoda.gguf.reader import LazyArrayReader
from pagoda.gguf.rope import TENSOR as ROPE_FREQS
from pagoda.gguf.tokenizer import load_tokenizer
from pagoda.gguf.weights import iter_hf_weights
from pagoda.quant import CheckpointTensor


class GGUFModel:
    """A GGUF checkpoint, read lazily through a memory map.

    Opening parses the metadata and builds `config`; an unsupported
    architecture or rope scaling is a ValueError here. Tensor data is read
    only by `iter_weights`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._reader = LazyArrayReader(self.path)
        self.metadata = GGUFMetadata(self._reader)
        self.arch = arch_spec(self.metadata.architecture)
        shapes = {t.name: torch_shape(t) for t in self._reader.tensors}
        rope_freqs = next((dequantize(t) for t in self._reader.tensors
                           if t.name == ROPE_FREQS), None)
        self.config: PretrainedConfig = build_config(self.metadata, self.arch, shapes,
                                                     rope_freqs)

    def iter_weights(self, keep_quantized: bool = False,
                     act_block: int | None = None) -> Iterator[tuple[str, CheckpointTensor]]:
        """(HF checkpoint name, float32 tensor) pairs, one tensor in memory at a time: each
        tensor's part of the file leaves the process's resident set once its weight is
        taken (`LazyArrayReader.drop_pages`), so a load holds the weights as built, not
        also the whole file.

        With `keep_quantized`, Q4_0/Q4_1/Q8_0 matrices come as `GroupQuantWeight` instead,
        asking for activations rounded to int8 blocks of `act_block` where given.
        """
        return iter_hf_weights(self._reader.tensors, self.arch, self.config, keep_quantized,
                               done=self._reader.drop_pages, act_block=act_block)

    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        """The file's tokenizer, special tokens and chat template."""
        return load_tokenizer(self.path, self.metadata)

    def tensor_types(self) -> dict[str, str]:
        """GGUF tensor name -> GGML type name (e.g. `Q4_1`), in file order."""
        return {t.name: t.tensor_type.name for t in self._reader.tensors}

    def describe(self) -> str:
        """A one-line human summary of the file."""
        c = self.config
        types = Counter(self.tensor_types().values())
        mix = ", ".join(f"{name} x{count}" for name, count in types.most_common())
        size_mib = sum(int(t.n_bytes) for t in self._reader.tensors) / 2**20
        name = self.metadata.get("general.name", self.path.name)
        return (
            f"{name}: {self.metadata.architecture} -> {self.arch.hf_architecture}, "
            f"{c.num_hidden_layers} layers, hidden {c.hidden_size}, "
            f"heads {c.num_attention_heads}/{c.num_key_value_heads}, vocab {c.vocab_size}, "
            f"context {c.max_position_embeddings}; {len(self._reader.tensors)} tensors "
            f"({mix}), {size_mib:.1f} MiB"
        )
