"""A small HTTP server on loopback that answers the Hugging Face hub's
resolve protocol, for testing the real huggingface_hub download path.

    HEAD/GET /{org}/{repo}/resolve/{revision}/{filename}

HEAD answers X-Repo-Commit, ETag and Content-Length; GET honours
`Range: bytes=N-` with 206.  Knobs: `token` (repos that need
`Authorization: Bearer <token>`), `cut_after` (send that many bytes of a
full GET, then drop the connection), `stall_after` (send that many bytes,
then hold the connection until `release` is set).
"""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


class HubServer:
    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}
        self.token: dict[str, str] = {}          # repo -> required token
        self.stall_after: int | None = None
        self.cut_after: int | None = None       # send that many bytes of a full GET, then drop it
        self.stalled = threading.Event()        # set once a GET has stalled
        self.release = threading.Event()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_HEAD(self):
                server._serve(self, body=False)

            def do_GET(self):
                server._serve(self, body=True)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def add(self, repo: str, filename: str, data: bytes) -> None:
        self.files[(repo, filename)] = data

    def _serve(self, h: BaseHTTPRequestHandler, *, body: bool) -> None:
        rng = h.headers.get("Range")
        self.requests.append((h.command, h.path, rng))
        m = RESOLVE.match(h.path.split("?")[0])
        if not m:
            return self._error(h, 404, "RepoNotFound", "no such route")
        repo, filename = m["repo"], m["file"]
        if not any(r == repo for r, _ in self.files):
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        need = self.token.get(repo)
        if need is not None:
            auth = h.headers.get("Authorization", "")
            if not auth:
                return self._error(h, 401, None, "Access to this repository is restricted.")
            if auth != f"Bearer {need}":
                return self._error(h, 403, "GatedRepo", "Access to model is restricted.")
        data = self.files.get((repo, filename))
        if data is None:
            return self._error(h, 404, "EntryNotFound", "Entry not found")
        start = 0
        if rng and body:
            start = int(re.match(r"bytes=(\d+)-", rng).group(1))
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(data) - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if not body:
            return
        payload = data[start:]
        if self.cut_after is not None and start == 0:
            h.wfile.write(payload[:self.cut_after])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if self.stall_after is not None and start == 0:
            h.wfile.write(payload[:self.stall_after])
            h.wfile.flush()
            self.stalled.set()
            self.release.wait(60)
            h.close_connection = True
            return
        h.wfile.write(payload)

    def _error(self, h, status, code, message) -> None:
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        h.send_header("Content-Length", "0")
        h.end_headers()
