"""LoRA adapters served beside the base model (`--enable-lora`).

`LoRARequest` (public) names an adapter for a request; `adapter` reads and checks a PEFT
adapter's files without torch (the front end refuses a bad one before it is scheduled);
`layers` holds each linear layer's device slots and applies the batched ops; `manager`
is the worker's: which adapter sits in which slot, an LRU of host copies, each step's
per-token slots.
"""

from pagoda.lora.request import LoRARequest

__all__ = ["LoRARequest"]
