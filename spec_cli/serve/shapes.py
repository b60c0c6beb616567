"""Each API's error shape, chosen by the route's path: OpenAI's
(`{"error": {"message", "type", "param", "code"}}`, also the Responses
API's and llama-server's), Anthropic's (`{"type": "error", "error":
{"type", "message"}}`) and Ollama's (`{"error": "message"}`).  Pure."""

from __future__ import annotations

from .checks import ApiError

# Anthropic's error types by HTTP status (its documented list)
_ANTHROPIC = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
              404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
              413: "request_too_large", 415: "invalid_request_error", 429: "rate_limit_error",
              500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


def api_of(path: str) -> str:
    """"anthropic", "ollama" or "openai": whose shape a route's errors take."""
    if path == "/v1/messages" or path.startswith(("/v1/messages/", "/messages")):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def anthropic_error(e: ApiError) -> dict:
    kind = _ANTHROPIC.get(e.status, "invalid_request_error" if e.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


def ollama_error(e: ApiError) -> dict:
    return {"error": e.message}


def error_body(path: str, e: ApiError) -> dict:
    api = api_of(path)
    if api == "anthropic":
        return anthropic_error(e)
    if api == "ollama":
        return ollama_error(e)
    return e.body()
