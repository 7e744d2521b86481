"""A scripted OpenAI-compatible chat server on a loopback port: each POST to
``.../chat/completions`` answers the next scripted reply and keeps the request, so a test drives a
trainer's real rollout machinery with fixed completions and reads what the model was shown."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from typing_extensions import Self


class ChatStub:
    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404)
                    return
                with stub._lock:
                    stub.requests.append(body)
                    content = stub.replies.pop(0) if stub.replies else "no more scripted replies"
                reply = {
                    "id": f"chatcmpl-{len(stub.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "stub"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
