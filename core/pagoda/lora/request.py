"""Which LoRA adapter a request runs with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoRARequest:
    """A PEFT adapter directory (adapter_config.json, adapter_model.safetensors) under a
    name and an integer id >= 1. The id is the adapter's identity in the engine (its device
    slot, its prefix-cache blocks): one id must always mean the same adapter."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    def __post_init__(self) -> None:
        if self.lora_int_id < 1:
            raise ValueError(f"lora_int_id must be >= 1, got {self.lora_int_id}")
        if not self.lora_name:
            raise ValueError("lora_name must not be empty")
