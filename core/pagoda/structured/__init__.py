"""Structured outputs: a request's output constrained by a grammar (a JSON schema, any JSON
object, a regular expression, a choice of strings, an EBNF grammar or an xgrammar structural tag).

The public type is `StructuredOutputsParams` (no heavy imports). The grammar engine is
xgrammar: `check` validates a grammar in the front end, `pagoda.structured.engine` compiles
them and keeps one matcher per request in the engine core, and the sampler applies each
step's token bitmask on the device (the `apply_token_bitmask` op).
"""

from pagoda.structured.params import StructuredOutputsParams

__all__ = ["StructuredOutputsParams"]
