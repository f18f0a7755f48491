"""A loopback HTTP server for tests that need a server of a given behaviour (a wrong one, a recorded one)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (method, path, request body) -> (status, content type, response body)
Answer = Callable[[str, str, bytes], tuple[int, str, str]]


@contextmanager
def answering(answer: Answer) -> Iterator[str]:
    """Serve `answer` on 127.0.0.1 for the block; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, ctype, body = answer(method, self.path, request)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:
            self._reply("POST")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
