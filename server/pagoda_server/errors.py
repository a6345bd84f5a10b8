"""Errors as clients expect them: OpenAI-style bodies, Anthropic-style under /v1/messages.

Every failure becomes a JSON error with the right status; a traceback only reaches the
server log.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from pagoda.frontend.async_llm import (
    EngineDeadError,
    EngineOverloadedError,
    EngineRestartingError,
    RequestTimeoutError,
)

_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                 404: "invalid_request_error", 405: "invalid_request_error"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                    413: "request_too_large", 503: "overloaded_error", 504: "timeout_error"}


class APIError(Exception):
    """A failure to report to the client as `status` with `message`."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    def openai_body(self) -> dict[str, Any]:
        kind = _OPENAI_TYPES.get(self.status, "server_error" if self.status >= 500 else
                                 "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param,
                          "code": self.code}}

    def anthropic_body(self) -> dict[str, Any]:
        kind = _ANTHROPIC_TYPES.get(self.status, "api_error" if self.status >= 500 else
                                    "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}

    def body_for(self, path: str) -> dict[str, Any]:
        return self.anthropic_body() if is_anthropic_path(path) else self.openai_body()


class ClientDisconnected(Exception):
    """The client went away; its request was aborted."""


def is_anthropic_path(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_param(message: str, known: set[str]) -> str | None:
    """The field an error message starts with ("max_tokens must be ..."), if in `known`."""
    match = re.match(r"(\w+)[ =]", message)
    return match.group(1) if match and match.group(1) in known else None


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def engine_dead(reason: object) -> APIError:
    return APIError(503, f"the engine is not running ({reason}); restart the server",
                    code="engine_dead")


RETRY_AFTER_S = 1
"""What a 503 of an engine at its request limit tells the client to wait, in seconds."""
RESTART_RETRY_AFTER_S = 5
"""What a 503 of an engine core restarting tells the client to wait, in seconds: about
the time a small model takes to load (the OpenAI clients wait that long, then retry)."""


def overloaded(reason: object) -> APIError:
    return APIError(503, str(reason), code="overloaded",
                    headers={"Retry-After": str(RETRY_AFTER_S)})


def engine_restarting(reason: object) -> APIError:
    return APIError(503, str(reason), code="engine_restarting",
                    headers={"Retry-After": str(RESTART_RETRY_AFTER_S)})


def request_timeout(reason: object) -> APIError:
    return APIError(504, str(reason), code="request_timeout")


def as_api_error(exc: BaseException) -> APIError:
    """The error to report for a failure (an unexpected one: 500, naming only its type)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, EngineRestartingError):
        return engine_restarting(exc)
    if isinstance(exc, RequestTimeoutError):
        return request_timeout(exc)
    if isinstance(exc, EngineDeadError):
        return engine_dead(exc)
    if isinstance(exc, EngineOverloadedError):
        return overloaded(exc)
    return APIError(500, f"internal server error ({type(exc).__name__})")


def error_response(error: APIError, path: str) -> JSONResponse:
    return JSONResponse(error.body_for(path), status_code=error.status, headers=error.headers)


_TYPE_NAMES = ("str", "int", "float", "bool", "list", "dict", "none")


def _is_branch(part: object) -> bool:
    """A pydantic label of a union branch or validator ("list[int]", "function-after[...]")."""
    return isinstance(part, str) and (part in _TYPE_NAMES or
                                      not re.fullmatch(r"[A-Za-z_]\w*", part))


def _field_path(loc: tuple[Any, ...]) -> str:
    """("body", "messages", 0, "content") -> "messages[0].content", without branch labels."""
    path = ""
    for part in loc[1:] if loc[:1] == ("body",) else loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _is_branch(part):
            path += f".{part}" if path else part
    return path


def _union_alternatives(errors: list[dict[str, Any]], loc: tuple[Any, ...]) -> list[str] | None:
    """The branch labels of the union at the first error's location, if it is one."""
    cut = next((i for i, part in enumerate(loc) if _is_branch(part)), None)
    if cut is None:
        return None
    prefix = loc[:cut]
    labels = [tuple(e["loc"])[cut] for e in errors if tuple(e["loc"])[:cut] == prefix
              and len(e["loc"]) > cut and _is_branch(tuple(e["loc"])[cut])]
    return list(dict.fromkeys(labels)) if len(labels) > 1 else None


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """The first problem of a failed body validation, naming the field."""
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    path = _field_path(loc)
    if first["type"] == "json_invalid":
        return bad_request("the request body is not valid JSON")
    if first["type"] == "extra_forbidden":
        return bad_request(f"unknown field {path!r}: it is not part of this API", path)
    if first["type"] == "missing":
        return bad_request(f"{path} is required", path)
    if first["type"] in ("model_attributes_type", "dict_type") and not path:
        return bad_request("the request body must be a JSON object")
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    alternatives = _union_alternatives(errors, loc)
    if alternatives:
        message = f"invalid value; expected one of: {', '.join(alternatives)}"
    if not path:  # a check of the whole body: its message starts "field: ..."
        named = re.match(r"([\w.\[\]]+): ", message)
        path = named.group(1) if named else ""
        return bad_request(message, path or None)
    leaf = re.split(r"[.\[]", path)[-1] if path else ""
    if path and not message.startswith(f"{leaf} "):
        message = f"{path}: {message}"
    return bad_request(message, path or None)


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return error_response(exc, request.url.path)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(validation_error(list(exc.errors())), request.url.path)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return error_response(APIError(exc.status_code, str(exc.detail)), request.url.path)

    async def on_disconnect(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({}, status_code=499)  # nobody is listening

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises after this, so the server log gets the traceback.
        return error_response(as_api_error(exc), request.url.path)

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(EngineDeadError, on_other)
    app.add_exception_handler(EngineOverloadedError, on_other)
    app.add_exception_handler(RequestTimeoutError, on_other)
    app.add_exception_handler(ClientDisconnected, on_disconnect)
    app.add_exception_handler(Exception, on_other)
