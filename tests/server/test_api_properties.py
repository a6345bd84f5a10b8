"""Property-based API testing with schemathesis against the server's own OpenAPI document:
for requests generated from each operation's schema (valid and invalid), no 5xx, no
traceback in any body, and every 4xx a JSON error with a message."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

EXAMPLES = 15
"""Generated requests per operation (bounded: CI runs this on 2 cores)."""


def _check(response, what: str) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:500])
    assert "Traceback" not in response.text, what
    if 400 <= response.status_code < 500:
        body = response.json()
        message = (body.get("error") or {}).get("message")
        assert isinstance(message, str) and message, (what, body)


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
def test_generated_requests_never_break_the_server(server, mode: GenerationMode) -> None:
    """Positive: requests that follow the schemas; negative: requests that break them."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json",
                                           headers=server.headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {"/v1/chat/completions", "/v1/completions", "/v1/messages"} <= {
        op.path for op in operations}
    checked = []
    for operation in operations:
        @given(case=operation.as_strategy(mode))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            response = case.call(headers=server.headers, timeout=60)
            _check(response, f"{case.method} {case.formatted_path}")

        try:
            check()
        except Unsatisfiable:  # nothing to break (negative mode, no parameters or body)
            assert mode is GenerationMode.NEGATIVE, operation.path
            continue
        checked.append(operation.path)
    assert "/v1/chat/completions" in checked and len(checked) >= 10, checked
