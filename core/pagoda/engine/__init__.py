"""The engine: requests, KV cache manager, scheduler, engine core."""
