"""Per-request block tables over the block pool, with prefix caching and forks."""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.engine.block_pool import BlockPool, KVBlock, hash_block, root_hash
from pagoda.engine.request import Request


@dataclass
class PrefixCacheStats:
    """Prompt tokens looked up in the prefix cache, and how many were found."""

    queries: int = 0
    hits: int = 0

    def record(self, queried_tokens: int, hit_tokens: int) -> None:
        self.queries += queried_tokens
        self.hits += hit_tokens

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks, enable_prefix_caching)
        self.stats = PrefixCacheStats()
        self._blocks: dict[str, list[KVBlock]] = {}
        self._block_ids: dict[str, list[int]] = {}
        self._num_hashed: dict[str, int] = {}

    @property
    def usage(self) -> float:
        return self.pool.usage

    def block_ids(self, request_id: str) -> list[int]:
        """The request's block table. The list is live (it grows with the request): read
        it before the next allocation, never modify it."""
        return self._block_ids.get(request_id, [])

    def _update_hashes(self, request: Request, num_tokens: int) -> None:
        """Extend request.block_hashes over the full blocks of its first num_tokens tokens."""
        bs = self.block_size
        for i in range(len(request.block_hashes), num_tokens // bs):
            parent = request.block_hashes[i - 1] if i else root_hash(request.lora_id)
            tokens = request.token_ids_between(i * bs, (i + 1) * bs)
            request.block_hashes.append(hash_block(parent, tokens))

    def find_computed_blocks(self, request: Request) -> list[KVBlock]:
        """Blocks whose KV this (not yet allocated) request can reuse: its fork parent's
        prompt blocks, else a prefix-cache hit. At least the last token is left to compute
        (its logits are needed, or, for a pooling request, its own hidden state), and
        prompt logprobs need every position computed."""
        max_blocks = (request.num_tokens - 1) // self.block_size
        parent = request.fork_of
        if parent is not None and parent.request_id in self._blocks:
            shared = min(max_blocks, parent.num_computed_tokens // self.block_size)
            return self._blocks[parent.request_id][:shared]
        if not self.enable_prefix_caching or request.wants_prompt_logprobs:
            return []
        self._update_hashes(request, request.num_tokens)
        hits = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def allocate_slots(
        self, request: Request, num_new_tokens: int, computed: list[KVBlock] | None = None
    ) -> bool:
        """Reserve blocks for `num_new_tokens` more tokens (after `computed` reused blocks).

        Returns False, changing nothing, when the pool cannot supply them.
        """
        computed = computed or []
        blocks = self._blocks.setdefault(request.request_id, [])
        start = request.num_computed_tokens + len(computed) * self.block_size
        needed = -(-(start + num_new_tokens) // self.block_size) - len(blocks) - len(computed)
        reclaimed = sum(1 for b in computed if b.ref_count == 0)  # cache hits sitting in the free queue
        if needed > self.pool.num_free_blocks - reclaimed:
            if not blocks:
                del self._blocks[request.request_id]
            return False
        ids = self._block_ids.setdefault(request.request_id, [])
        if computed:
            self.pool.acquire(computed)
            blocks.extend(computed)
            ids.extend(b.block_id for b in computed)
        if needed > 0:
            new_blocks = self.pool.allocate(needed)
            blocks.extend(new_blocks)
            ids.extend(b.block_id for b in new_blocks)
        self._cache_full_blocks(request, min(start + num_new_tokens, request.num_tokens))
        return True

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash the blocks that will be full once `num_tokens` tokens are computed."""
        if not self.enable_prefix_caching:
            return
        self._update_hashes(request, num_tokens)
        blocks = self._blocks[request.request_id]
        done = self._num_hashed.get(request.request_id, 0)
        full = num_tokens // self.block_size
        for i in range(done, full):
            self.pool.cache(blocks[i], request.block_hashes[i])
        self._num_hashed[request.request_id] = max(done, full)

    def trim(self, request: Request) -> None:
        """Release the blocks past the request's computed tokens (they held the KV of
        rejected draft tokens), tail first."""
        blocks = self._blocks.get(request.request_id)
        keep = -(-request.num_computed_tokens // self.block_size)
        if blocks is None or len(blocks) <= keep:
            return
        self.pool.release(reversed(blocks[keep:]))
        del blocks[keep:]
        self._block_ids[request.request_id] = self._block_ids[request.request_id][:keep]

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first so a prefix outlives its suffix."""
        blocks = self._blocks.pop(request.request_id, [])
        self._block_ids.pop(request.request_id, None)
        self._num_hashed.pop(request.request_id, None)
        self.pool.release(reversed(blocks))

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()
