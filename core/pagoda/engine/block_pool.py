"""The pool of KV cache blocks: allocation, reference counts and the prefix cache.

A block with no users stays in the free queue but keeps its hash, so a later request
with the same prefix can take it back (a cache hit). Allocation takes freed blocks that
hold no cached prefix first (already written: on the host their pages are in memory),
then blocks never used, then cached blocks from the front of the queue (least recently
freed first), evicting their cached contents.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(eq=False)
class KVBlock:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None
    """Chained hash of the block's tokens and all tokens before it, once full."""


def hash_block(parent_hash: bytes | None, token_ids: Sequence[int]) -> bytes:
    """Chained hash: the block's identity covers its tokens and its whole prefix."""
    h = hashlib.sha256(parent_hash or b"pagoda-root")
    h.update(b",".join(str(t).encode() for t in token_ids))
    return h.digest()


def root_hash(lora_id: int) -> bytes | None:
    """The parent hash of a request's first block: None for the base model, else one per
    LoRA adapter, so that no two adapters (whose KV differs) share cached blocks."""
    return None if lora_id == 0 else hashlib.sha256(b"pagoda-lora-%d" % lora_id).digest()


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool):
        if num_blocks < 1:
            raise ValueError(f"KV cache needs at least one block, got {num_blocks}")
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.enable_caching = enable_caching
        self._plain: OrderedDict[int, None] = OrderedDict()
        """Freed blocks without a hash: nothing to lose by taking them."""
        self._never_used = list(range(num_blocks - 1, -1, -1))
        """Blocks no request has had yet, the lowest id last (taken first)."""
        self._cached_free: OrderedDict[int, None] = OrderedDict()
        """Freed blocks holding a cached prefix, least recently freed first."""
        self._cached: dict[bytes, KVBlock] = {}

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._plain) + len(self._never_used) + len(self._cached_free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use by requests (cached free blocks count as free)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def lookup(self, block_hash: bytes) -> KVBlock | None:
        return self._cached.get(block_hash)

    def allocate(self, count: int) -> list[KVBlock]:
        """Take `count` free blocks (evicting cached contents, oldest first)."""
        if count > self.num_free_blocks:
            raise RuntimeError(f"asked for {count} blocks, {self.num_free_blocks} free")
        taken = []
        for _ in range(count):
            block = self.blocks[self._take()]
            self._evict(block)
            block.ref_count = 1
            taken.append(block)
        return taken

    def _take(self) -> int:
        if self._plain:
            return self._plain.popitem(last=False)[0]
        if self._never_used:
            return self._never_used.pop()
        return self._cached_free.popitem(last=False)[0]

    def acquire(self, blocks: Iterable[KVBlock]) -> None:
        """Add a user to blocks found in the cache or shared by a fork."""
        for block in blocks:
            if block.ref_count == 0:
                del self._cached_free[block.block_id]  # only cached blocks are found while free
            block.ref_count += 1

    def release(self, blocks: Iterable[KVBlock]) -> None:
        """Drop a user; blocks nobody uses go to the back of their free queue."""
        for block in blocks:
            block.ref_count -= 1
            if block.ref_count == 0:
                queue = self._plain if block.block_hash is None else self._cached_free
                queue[block.block_id] = None

    def cache(self, block: KVBlock, block_hash: bytes) -> None:
        """Record a full block's hash so later requests with this prefix can reuse it."""
        if not self.enable_caching or block.block_hash is not None:
            return
        block.block_hash = block_hash
        self._cached.setdefault(block_hash, block)

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            if self._cached.get(block.block_hash) is block:
                del self._cached[block.block_hash]
            block.block_hash = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix; only possible when no block is in use."""
        if self.num_free_blocks != self.num_blocks:
            return False
        for block in self.blocks:
            self._evict(block)
        self._plain.update(self._cached_free)
        self._cached_free.clear()
        return True
