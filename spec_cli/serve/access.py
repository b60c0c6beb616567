"""Who may talk to `spec-cli serve`, checked before a request reaches the
API: no cross-site access, no DNS rebinding, no hung connections.

- `Origin`: a browser names the page that sent a request.  A page on a
  loopback address, or one in the `--cors` list, is allowed (and given
  CORS headers, its preflight answered); any other is refused 403, so a
  web page on the internet cannot start generations on this machine.
  Requests with no Origin (editors, `curl`, the `openai` client) pass.
- `Host`: a server bound to loopback answers only requests addressed to a
  loopback name or address (DNS rebinding points a foreign name at
  127.0.0.1 to make the browser treat it as same-origin); `--allow-host
  NAME` adds a name (a local reverse proxy that passes its own).  A server
  opened with `--host` to the network checks no Host: use `--api-key` there.
- `Content-Type`: a POST must say `application/json`.  Plain-text and form
  bodies are what a page may send without a preflight.
- A connection that has not sent a whole request head within `head_s`
  seconds (`--read-timeout`) is closed (uvicorn has no such timeout of
  its own).
"""

from __future__ import annotations

import ipaddress
import json
import logging
from urllib.parse import urlsplit

from uvicorn.protocols.http.h11_impl import H11Protocol

from .api import ApiError
from .shapes import error_body

log = logging.getLogger("spec_cli.serve")

READ_S = 10.0  # seconds a connection has to send a request head (and between pieces of a body: app.py)
PREFLIGHT_HEADERS = "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta"


def is_loopback(host: str) -> bool:
    """A loopback name or address ("localhost", 127.0.0.0/8, ::1)."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(value: str) -> str:
    """The host of a Host header ("127.0.0.1:8012", "[::1]:8012")."""
    value = value.strip()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def origin_allowed(origin: str, allowed: frozenset[str]) -> bool:
    if origin.rstrip("/").lower() in allowed or "*" in allowed:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and is_loopback(parts.hostname)


class Access:
    """ASGI middleware in front of the app: Origin, Host and Content-Type."""

    def __init__(self, app, *, check_host: bool, cors: tuple[str, ...] = (), hosts: tuple[str, ...] = ()):
        self.app, self.check_host = app, check_host
        self.cors = frozenset(o.rstrip("/").lower() for o in cors)
        self.hosts = frozenset(h.lower().rstrip(".") for h in hosts)  # names allowed besides loopback

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host, origin = headers.get("host", ""), headers.get("origin")
        method = scope["method"]
        name = _hostname(host).lower().rstrip(".")
        if self.check_host and host and not is_loopback(name) and name not in self.hosts:  # no Host: no browser
            log.warning("refused a request for host %r (not this machine's loopback)", host[:100])
            return await _refuse(scope, send, 403, f"the Host header {host[:100]!r} is not a loopback address: this "
                                            "server listens on loopback only (a proxy or alias that sends this name: "
                                            "restart it with --allow-host NAME)", kind="permission_error")
        extra: list[tuple[bytes, bytes]] = []
        if origin is not None:
            if not origin_allowed(origin, self.cors):
                log.warning("refused a request from origin %r", origin[:100])
                return await _refuse(scope, send, 403, f"requests from the web page at {origin[:100]!r} are refused: "
                                                "restart the server with --cors ORIGIN to allow it",
                                     kind="permission_error")
            extra = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
            if method == "OPTIONS" and "access-control-request-method" in headers:
                return await _send(send, 204, b"", extra + [
                    (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                    (b"access-control-allow-headers", PREFLIGHT_HEADERS.encode()),
                    (b"access-control-max-age", b"600")])
        if method == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return await _refuse(scope, send, 415, f"the body must be JSON sent as 'Content-Type: application/json', "
                                                f"not {kind or 'no content type'!r} "
                                                "(curl: add -H 'Content-Type: application/json')", extra=extra)
        if not extra:
            return await self.app(scope, receive, send)

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return await self.app(scope, receive, send_with_cors)


async def _refuse(scope, send, status: int, message: str, *, kind: str = "invalid_request_error",
                  extra: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(error_body(scope.get("path", ""), ApiError(status, message, kind=kind))).encode()
    await _send(send, status, body, [(b"content-type", b"application/json"), *extra])


async def _send(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that has not sent a
    whole request head within `head_s` seconds (a first request, or the
    next one on a kept-alive connection)."""

    head_s = READ_S
    _head_timer = None

    @classmethod
    def with_timeout(cls, seconds: float) -> type["Protocol"]:
        return type(cls.__name__, (cls,), {"head_s": seconds})

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the next request's head begins
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # its head is in

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            log.info("closed a connection that sent no whole request head in %g s", self.head_s)
            self.transport.close()
