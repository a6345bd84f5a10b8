"""Helpers for the model tests: tiny HF checkpoints and a hand-built paged-attention batch."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from pagoda.attention import AttentionMetadata

TINY = dict(
    vocab_size=160,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
)


def tiny_config(cls: type[PretrainedConfig], **overrides: object) -> PretrainedConfig:
    return cls(**{**TINY, **overrides})


def random_hf_model(config: PretrainedConfig, seed: int = 0) -> PreTrainedModel:
    """An HF model whose every parameter (norms and biases too) is random and O(0.1)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager"
    )
    randomize_weights(model)
    return model.eval()


@torch.no_grad()
def randomize_weights(model: torch.nn.Module) -> None:
    """Every parameter O(0.1) noise; norm weights 1 + noise."""
    for name, param in model.named_parameters():
        noise = torch.randn_like(param) * 0.1
        param.copy_(1 + noise if name.endswith("norm.weight") else noise)


def save_checkpoint(
    model: PreTrainedModel, path: Path, max_shard_size: str | None = None
) -> Path:
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    return path


class PagedBatch:
    """Runs a model over steps of a hand-made schedule with a shuffled paged KV cache.

    Each step is a list of (sequence id, new tokens); the sequence's earlier tokens are
    already in the cache. Blocks come from a shuffled pool, so block tables are
    non-contiguous.
    """

    def __init__(self, model: torch.nn.Module, block_size: int = 4, num_blocks: int = 64):
        self.model = model
        self.block_size = block_size
        spec = model.kv_cache_spec(block_size, torch.float32)
        self.kv_caches = [
            torch.zeros(spec.shape(num_blocks)) for _ in range(model.num_attention_layers)
        ]
        self.free = list(range(num_blocks))
        random.Random(0).shuffle(self.free)
        self.tokens: dict[int, list[int]] = {}
        self.blocks: dict[int, list[int]] = {}

    def step(self, batch: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """Logits [len(new tokens), vocab] for every new token, per sequence."""
        ids, positions, slots, starts, seq_lens = [], [], [], [0], []
        for seq, new in batch:
            tokens = self.tokens.setdefault(seq, [])
            blocks = self.blocks.setdefault(seq, [])
            first = len(tokens)
            tokens.extend(new)
            while len(blocks) * self.block_size < len(tokens):
                blocks.append(self.free.pop())
            for pos in range(first, len(tokens)):
                block, offset = divmod(pos, self.block_size)
                slots.append(blocks[block] * self.block_size + offset)
            ids += new
            positions += range(first, len(tokens))
            starts.append(starts[-1] + len(new))
            seq_lens.append(len(tokens))
        width = max(len(self.blocks[seq]) for seq, _ in batch)
        tables = [self.blocks[seq] + [0] * (width - len(self.blocks[seq])) for seq, _ in batch]
        metadata = AttentionMetadata(
            num_tokens=len(ids),
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            block_tables=torch.tensor(tables, dtype=torch.int32),
            query_start_loc=torch.tensor(starts, dtype=torch.int32),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            query_start_loc_cpu=starts,
            seq_lens_cpu=seq_lens,
            max_query_len=max(len(new) for _, new in batch),
            max_seq_len=max(seq_lens),
        )
        with torch.inference_mode():
            hidden = self.model(
                torch.tensor(ids), torch.tensor(positions), self.kv_caches, metadata
            )
            logits = self.model.compute_logits(hidden)
        return list(logits.split([len(new) for _, new in batch]))


def hf_logits(model: PreTrainedModel, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([tokens])).logits[0].float()


def random_tokens(n: int, seed: int, vocab: int = 160) -> list[int]:
    return torch.randint(vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def check_prefill_then_decode(model: torch.nn.Module, hf_model: PreTrainedModel, *,
                              atol: float, rtol: float, vocab: int = 160) -> None:
    """A 13-token prefill, then one decode at a time: each step's logits are HF's."""
    tokens = random_tokens(18, seed=1, vocab=vocab)
    expected = hf_logits(hf_model, tokens)
    runner = PagedBatch(model, block_size=4)
    (prefill,) = runner.step([(0, tokens[:13])])
    torch.testing.assert_close(prefill, expected[:13], atol=atol, rtol=rtol)
    for pos in range(13, len(tokens)):
        (decode,) = runner.step([(0, [tokens[pos]])])
        torch.testing.assert_close(decode, expected[pos : pos + 1], atol=atol, rtol=rtol)


def check_mixed_batch(model: torch.nn.Module, hf_model: PreTrainedModel, *, atol: float,
                      rtol: float, vocab: int = 160) -> None:
    """One flattened step holding a decode, a whole prefill and the rest of a chunked
    prefill: each sequence's logits are HF's for it alone."""
    seqs = {i: random_tokens(n, seed=i + 2, vocab=vocab) for i, n in enumerate((10, 14, 11))}
    runner = PagedBatch(model, block_size=8)
    runner.step([(0, seqs[0][:9]), (2, seqs[2][:6])])
    decode, prefill, chunk = runner.step([(0, seqs[0][9:]), (1, seqs[1]), (2, seqs[2][6:])])
    torch.testing.assert_close(decode, hf_logits(hf_model, seqs[0])[9:], atol=atol, rtol=rtol)
    torch.testing.assert_close(prefill, hf_logits(hf_model, seqs[1]), atol=atol, rtol=rtol)
    torch.testing.assert_close(chunk, hf_logits(hf_model, seqs[2])[6:], atol=atol, rtol=rtol)
