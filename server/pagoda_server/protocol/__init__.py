"""Request bodies of each API, as pydantic models that reject unknown fields."""
