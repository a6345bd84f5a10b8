"""Workers own a device, the model, its KV cache and the per-step model runner."""
