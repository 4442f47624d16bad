"""A loopback HTTP server that accepts PUT: where a test's CE uploads a job's output file.

    with PutServer() as server:        # 127.0.0.1, a free port, a thread per request
        url = server.url("up.dat")     # http://127.0.0.1:<port>/up.dat
        ...                            # the CE PUTs the file there
        server.wait_for("up.dat")      # its bytes (AssertionError after the timeout)

Each PUT body (``Content-Length`` bytes, at most :data:`MAX_BODY`; chunked transfer too) is kept in
memory by its path; a GET or HEAD of a stored path answers it, any other path 404.  Nothing is
written to disk.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

#: The largest body one PUT may carry.
MAX_BODY = 64 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # (quiet: the test says what it saw)
        self.server.requests.append(f"{self.command} {self.path}")

    def _body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
                if len(data) > MAX_BODY:
                    return None
        length = int(self.headers.get("Content-Length") or 0)
        return None if length > MAX_BODY else self.rfile.read(length)

    def _path(self) -> str:
        """The request's path (a client may send the absolute URL, as A-REX's HTTP client does)."""
        return urlsplit(self.path).path or "/"

    def _answer(self, code: int, body: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_PUT(self) -> None:
        body = self._body()
        if body is None:
            self._answer(413)
            return
        path = self._path()
        with self.server.lock:
            created = path not in self.server.files
            self.server.files[path] = body
        self._answer(201 if created else 204)

    def do_GET(self) -> None:
        body = self.server.files.get(self._path())
        self._answer(404) if body is None else self._answer(200, body)

    do_HEAD = do_GET

    def do_DELETE(self) -> None:
        with self.server.lock:
            gone = self.server.files.pop(self._path(), None)
        self._answer(404 if gone is None else 204)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.lock = threading.Lock()


class PutServer:
    """The server, serving in a thread of its own while the ``with`` block runs."""

    def __init__(self) -> None:
        self.server = _Server()
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> PutServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def files(self) -> dict[str, bytes]:
        with self.server.lock:
            return {path.lstrip("/"): body for path, body in self.server.files.items()}

    def wait_for(self, name: str, timeout: float = 120) -> bytes:
        """The bytes PUT to ``name``, once they are there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.files().get(name)
            if body is not None:
                return body
            time.sleep(0.5)
        raise AssertionError(f"nothing was PUT to {name} in {timeout:g} s; requests: {self.server.requests}")
