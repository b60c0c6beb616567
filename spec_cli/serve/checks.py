"""The checks every request field goes through, and the error a failed
one answers: OpenAI's error shape with its HTTP status, naming the field.
Pure functions, no HTTP."""

from __future__ import annotations

import math
from typing import Any


class ApiError(Exception):
    """An error answered in OpenAI's shape, with its HTTP status."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


def internal(exc: BaseException) -> ApiError:
    """A bug's 500: its kind, never its input (the log has the traceback)."""
    return ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details",
                    kind="server_error")


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", kind="unavailable_error")


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"'{param}' {message}", param=param)


MAX_INT = 2 ** 64  # the largest integer any numeric field takes, before its own bounds (a u64 seed, as Tabby sends: mod 2**31)


def number(body: dict, name: str, default, *, lo: float | None = None, hi: float | None = None,
            integer: bool = False, where: str | None = None):
    """body[name] checked; a 400 names `where` (a nested field's path), else `name`."""
    value = body.get(name)
    name = where or name
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(name, f"must be {'an integer' if integer else 'a number'}, not {value!r}")
    if isinstance(value, int) and abs(value) > MAX_INT:  # a float cannot hold it: refused before any arithmetic
        raise bad(name, f"must be at most 2**64 in size, not a {value.bit_length()}-bit integer")
    if integer and not float(value).is_integer():
        raise bad(name, f"must be an integer, not {value!r}")
    if not math.isfinite(value):
        raise bad(name, f"must be finite, not {value!r}")
    if lo is not None and value < lo:
        raise bad(name, f"must be at least {lo}, not {value!r}")
    if hi is not None and value > hi:
        raise bad(name, f"must be at most {hi}, not {value!r}")
    return int(value) if integer else float(value)


def typed(body: dict, name: str, default, kind: type, wrong):
    """body[name] if it is a `kind`, `default` if absent; else 400 with
    `wrong(value)` saying what it must be."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise bad(name, wrong(value))
    return value


def string(body: dict, name: str, default: str = "") -> str:
    return typed(body, name, default, str, lambda v: f"must be a string, not {type(v).__name__}")


def flag(body: dict, name: str, default: bool) -> bool:
    return typed(body, name, default, bool, lambda v: f"must be true or false, not {v!r}")


def json_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body
