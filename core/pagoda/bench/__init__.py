"""`pagoda bench`: offline throughput and latency, side by side with HF transformers."""
