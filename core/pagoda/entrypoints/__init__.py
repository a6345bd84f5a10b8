"""User entry points: the offline `LLM` API."""
