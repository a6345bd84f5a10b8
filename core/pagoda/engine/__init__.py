"""The engine core, in a process of its own when serving: requests, KV cache manager,
scheduler, and the loop that steps the executor (`pagoda.frontend` is the other side)."""
