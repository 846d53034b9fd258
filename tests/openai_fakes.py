"""A purpose-built loopback server for the failures a real server cannot be made to show on demand: one that accepts
connections and never answers, and one that stops in the middle of a stream. Everything else is tested against a real
server (`transformers serve`, tests/test_profile_openai.py).

`LoopbackServer(failure, good_requests)` listens on 127.0.0.1 (a free port). GET /v1/models lists `model`; the first
`good_requests` POSTs to /v1/completions stream a well-formed answer (one "x" per token up to max_tokens, finish_reason
"length", usage where stream_options asks); after that each POST fails as `failure` says:
- "hang": reads the request and never answers;
- "half_stream": sends the headers and two token chunks of a chunked body, then closes the connection;
- "no_finish": a complete body whose chunks never carry a finish_reason;
- "http500": an HTTP 500 with a JSON error.
With `failure="silent"` no request at all is answered (not even /v1/models).
"""

from __future__ import annotations

import json
import socketserver
import threading


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        fake: LoopbackServer = self.server.fake
        head, body = self._read_request()
        if head is None:
            return
        if fake.failure == "silent":
            fake.stopped.wait()
            return
        method, path = head.split(" ")[:2]
        if method == "GET" and path.startswith("/v1/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": fake.model, "object": "model"}]}))
        elif method == "POST" and path.startswith("/v1/completions"):
            with fake.lock:
                fake.posts += 1
                good = fake.posts <= fake.good_requests
            request = json.loads(body or b"{}")
            self._stream(request, None if good else fake.failure)
        else:
            self._send(404, json.dumps({"detail": "not found"}))

    def _read_request(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(65536)
            if not chunk:
                return None, None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next((int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0)
        while len(body) < length:
            body += self.request.recv(65536)
        return lines[0], body

    def _send(self, status: int, text: str):
        payload = text.encode()
        self.request.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: "
                             f"{len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)

    def _stream(self, request: dict, failure: str | None):
        fake: LoopbackServer = self.server.fake
        if failure == "hang":
            fake.stopped.wait()
            return
        if failure == "http500":
            self._send(500, json.dumps({"error": {"message": "engine crashed"}}))
            return
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: close\r\n\r\n")
        tokens = int(request.get("max_tokens", 4))
        for i in range(tokens):
            if failure == "half_stream" and i == 2:
                self.request.sendall(b"40\r\ndata: {\"choices\": [")  # a chunk cut short, then the connection closes
                return
            last = i == tokens - 1 and failure != "no_finish"
            self._event({"choices": [{"index": 0, "text": "x", "finish_reason": "length" if last else None}]})
        if (request.get("stream_options") or {}).get("include_usage"):
            self._event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens,
                                                  "total_tokens": tokens + 3}})
        self._chunk(b"data: [DONE]\n\n")
        self.request.sendall(b"0\r\n\r\n")

    def _event(self, chunk: dict):
        self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())

    def _chunk(self, data: bytes):
        self.request.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


class LoopbackServer:
    def __init__(self, failure: str, good_requests: int = 0, model: str = "fake-model"):
        self.failure, self.good_requests, self.model = failure, good_requests, model
        self.posts, self.lock, self.stopped = 0, threading.Lock(), threading.Event()
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.fake = self
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> LoopbackServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self._server.shutdown()
        self._server.server_close()
