"""Clients of the Crucible service (``crucible serve``, HTTP API under ``/v1``).

>>> c = Client("http://127.0.0.1:8080", token="...")
>>> task_id = c.submit("01_relu", task_source, candidate_source)
>>> record = c.wait(task_id)          # the task record; record["result"] is the result document
>>> batch = c.submit_batch([...]); for event in c.stream(batch): ...

Standard library only. Transient failures (connection errors, 429, 502, 503, 504) are retried
with exponential back-off; other HTTP errors raise :class:`ServiceError`.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

RETRY_STATUS = {429, 502, 503, 504}


class ServiceError(RuntimeError):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


def task_spec(task_name: str, task_source: str, candidate_source: str, **fields) -> dict:
    """A TaskSpec (see the service contract); ``fields``: options, priority, deadline_s, cache,
    labels."""
    spec = {
        "task_name": task_name,
        "task_source": task_source,
        "candidate_source": candidate_source,
    }
    spec.update(fields)
    return spec


class Client:
    def __init__(
        self, url: str, token: str | None = None, *, retries: int = 4, timeout_s: float = 60.0
    ):
        self.url = url.rstrip("/")
        self.token = token
        self.retries = retries
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, body: Any = None, timeout: float | None = None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=timeout or self.timeout_s) as resp:
                    return json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as e:
                body_text = e.read().decode(errors="replace")
                if e.code not in RETRY_STATUS or attempt == self.retries:
                    raise ServiceError(e.code, body_text) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt == self.retries:
                    raise
            time.sleep(min(0.2 * 2**attempt, 5.0))
        raise AssertionError("unreachable")

    def submit(self, task_name: str, task_source: str, candidate_source: str, **fields) -> str:
        """POST /v1/tasks; returns the task id."""
        reply = self._request(
            "POST", "/v1/tasks", task_spec(task_name, task_source, candidate_source, **fields)
        )
        return reply["id"]

    def submit_batch(self, specs: list[dict]) -> dict:
        """POST /v1/batches with TaskSpecs (see :func:`task_spec`); returns the reply
        (``{"batch_id", "task_ids": [...]}``)."""
        return self._request("POST", "/v1/batches", {"tasks": specs})

    def task(self, task_id: str, wait_s: float | None = None) -> dict:
        """GET /v1/tasks/{id}, long-polling up to ``wait_s`` for a terminal state."""
        query = f"?wait={wait_s:g}" if wait_s else ""
        return self._request(
            "GET", f"/v1/tasks/{task_id}{query}", timeout=(wait_s or 0) + self.timeout_s
        )

    def wait(self, task_id: str, timeout_s: float = 600.0, poll_s: float = 30.0) -> dict:
        """The task record once terminal (done, cancelled, timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.task(task_id, wait_s=min(poll_s, max(deadline - time.monotonic(), 1)))
            if record.get("state") in ("done", "cancelled", "timeout"):
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"task {task_id} not finished after {timeout_s} s")

    def batch(self, batch_id: str) -> dict:
        """GET /v1/batches/{id}: ``{"id", "total", "counts", "finished", "tasks": [...]}``."""
        return self._request("GET", f"/v1/batches/{batch_id}")

    def cancel(self, task_id: str) -> dict:
        """POST /v1/tasks/{id}/cancel: ``{"id", "cancelled", "state"}`` (``cancelled`` is false
        when the task was already terminal)."""
        return self._request("POST", f"/v1/tasks/{task_id}/cancel")

    def cancel_batch(self, batch_id: str) -> dict:
        """POST /v1/batches/{id}/cancel: ``{"id", "cancelled", "counts"}``: every queued or
        running task of the batch is cancelled (``cancelled`` counts them; terminal ones stay)."""
        return self._request("POST", f"/v1/batches/{batch_id}/cancel")

    def workers(self) -> list[dict]:
        """GET /v1/workers: every worker that reported, each with ``in_flight`` (its
        evaluations, ``{"task", "stage"}``)."""
        return self._request("GET", "/v1/workers")

    def health(self) -> dict:
        """GET /healthz: ``{"status", "store", "workers_live", "queue_depth", ...}`` (raises
        :class:`ServiceError` 503 while the store is down)."""
        return self._request("GET", "/healthz")

    def openapi(self) -> dict:
        """The service's OpenAPI document (GET /v1/openapi.json)."""
        return self._request("GET", "/v1/openapi.json")

    def stream(
        self, batch_id: str, read_timeout_s: float | None = None, keepalives: bool = False
    ) -> Iterator[dict]:
        """GET /v1/batches/{id}/events (server-sent events): yields ``{"event", "data"}`` per
        event, ``data`` parsed as JSON where it is JSON (a task's record; ``end``'s counts).
        ``read_timeout_s``: give up (``TimeoutError``) when nothing, not even the server's
        keep-alive comment, arrives for this long (default: wait forever). ``keepalives``: also
        yield ``{"event": "keepalive", "data": None}`` for each of those comments (a sign of
        life while no task ends)."""
        headers = {"Accept": "text/event-stream"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(f"{self.url}/v1/batches/{batch_id}/events", headers=headers)
        with urllib.request.urlopen(req, timeout=read_timeout_s) as resp:
            event, data = "message", []
            for raw in resp:
                line = raw.decode().rstrip("\r\n")
                if line.startswith(":"):
                    if keepalives:
                        yield {"event": "keepalive", "data": None}
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    text = "\n".join(data)
                    try:
                        payload = json.loads(text)
                    except json.JSONDecodeError:
                        payload = text
                    yield {"event": event, "data": payload}
                    if event == "end":
                        return
                    event, data = "message", []


class AsyncClient:
    """:class:`Client`'s methods as coroutines (each runs in a worker thread); ``stream`` is an
    async iterator."""

    def __init__(self, url: str, token: str | None = None, **kwargs):
        self._sync = Client(url, token, **kwargs)

    async def stream(self, batch_id: str) -> AsyncIterator[dict]:
        """:meth:`Client.stream` as an async iterator (the blocking read runs in a thread)."""
        events = self._sync.stream(batch_id)
        done = object()
        while True:
            event = await asyncio.to_thread(next, events, done)
            if event is done:
                return
            yield event

    def __getattr__(self, name: str):
        method = getattr(self._sync, name)
        if not callable(method):
            return method

        async def call(*args, **kwargs):
            return await asyncio.to_thread(method, *args, **kwargs)

        return call
