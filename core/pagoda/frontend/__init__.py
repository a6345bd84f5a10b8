"""The front end, in the caller's process: tokenizing, detokenizing, stop strings and
streaming around an engine core (`pagoda.engine`), in process (`LLMEngine`) or in a
process of its own (`AsyncLLM`)."""
