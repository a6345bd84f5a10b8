"""Which engine core takes a new request, when several serve one front end.

Each core has its own KV cache, so its own prefix cache. A request goes to the core that
last took a request with the same first KV block (its prefix is likely cached there),
unless that core is busier than the least loaded one by more than `slack`; otherwise, and
for prompts shorter than a block, to the least loaded core. Load is the number of
requests a core has in flight, as the front end counts them. A core that is down (dead
and restarting) takes nothing until it is up again.
"""

from __future__ import annotations

from collections import OrderedDict

AFFINITY_ENTRIES = 1 << 16
"""First blocks remembered (least recently routed forgotten first)."""


class LoadBalancer:
    def __init__(self, num_cores: int, block_size: int, *, slack: int = 2):
        self.load = [0] * num_cores
        self.block_size = block_size
        self.slack = slack
        self._affinity: OrderedDict[tuple[int, ...], int] = OrderedDict()

    def choose(self, prompt_token_ids: list[int], down: frozenset[int] | set[int] = frozenset()
               ) -> int:
        """The core for a new request of this prompt (counted in its load), none of those
        `down` (at least one core must be up)."""
        up = [core for core in range(len(self.load)) if core not in down]
        least = min(up, key=self.load.__getitem__)
        core = least
        first_block = tuple(prompt_token_ids[: self.block_size])
        if len(first_block) == self.block_size:
            known = self._affinity.get(first_block)
            if (known is not None and known not in down
                    and self.load[known] <= self.load[least] + self.slack):
                core = known
            self._affinity[first_block] = core
            self._affinity.move_to_end(first_block)
            if len(self._affinity) > AFFINITY_ENTRIES:
                self._affinity.popitem(last=False)
        self.load[core] += 1
        return core

    def finished(self, core: int) -> None:
        """A request of `core` finished or was aborted."""
        self.load[core] -= 1
