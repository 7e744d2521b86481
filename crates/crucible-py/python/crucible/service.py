"""The judge behind a ``crucible serve``: :class:`ServiceJudge` has the in-process
:class:`crucible.Judge`'s ``evaluate`` and ``evaluate_many``, so :class:`crucible.scoring.KernelScorer`
and every trainer integration can send a step's candidates to the service's warm GPU workers
instead of judging them in the trainer's process::

    judge = crucible.make_judge(service="http://gpu-node:8700", token="...", trials=5)
    reward = KernelReward(tasks, judge=judge)          # or KernelReward(tasks, service=..., token=...)

The result documents are the service's judge's, byte for byte what its workers wrote; nothing is
made up here. A task whose deadline passed (``deadline_s``, the service's ``timeout`` result) has
no reward, like an ``infra_error``. A task someone cancelled has no result at all: that raises
:class:`NotJudged`, as does a service that gives no sign of life for two minutes, or whose batch
has not ended ``deadline_s`` plus two minutes after it was submitted.
"""

from __future__ import annotations

import json
import time
import urllib.error

from ._native import EvalResult
from .client import RETRY_STATUS, Client, ServiceError

# What the service's `options` take (JudgeOptionsBody); the rest of the in-process judge's
# options (`python`, `device`, `verify_policy_file`, `stage_timeout`) are the workers' own.
SERVICE_OPTIONS = (
    "trials",
    "seed",
    "size_profile",
    "timing",
    "verify_policy",
    "tolerance",
    "generalize",
)
# Tasks and JSON bytes per submitted batch, well inside the server's defaults (10,000 and 64 MiB).
BATCH_TASKS = 1000
BATCH_BYTES = 32 << 20
# How long the wait outlives the tasks' deadline before the service counts as unreachable.
GRACE_S = 120.0
# How long the service may give no sign of life (refused, reset, silent) before the wait gives
# up: a restart of the server takes seconds, and its queue keeps every task.
UNREACHABLE_S = 120.0


class NotJudged(RuntimeError):
    """Tasks that ended without a result (cancelled), or a service that stopped answering."""


class ServiceJudge:
    """A ``crucible serve`` as a judge (see the module docstring).

    ``url`` and ``token``: the service and its bearer token. ``client`` is the fair-share key the
    tasks are submitted under, ``priority`` their priority (-10..10). ``deadline_s``: each task
    ends in the service's ``timeout`` (no reward) if not judged this many seconds after it was
    submitted. ``options`` are judge options the service takes: ``trials``, ``seed``,
    ``size_profile``, ``timing``, ``verify_policy``, ``tolerance``, ``generalize``.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        client: str = "crucible-py",
        priority: int = 0,
        deadline_s: float = 3600.0,
        cache: bool = True,
        retries: int = 4,
        **options,
    ):
        unknown = sorted(set(options) - set(SERVICE_OPTIONS))
        if unknown:
            raise TypeError(
                f"the service does not take judge option(s) {unknown}: its workers set their "
                f"own device, interpreter and stage deadlines; it takes {list(SERVICE_OPTIONS)}"
            )
        if not deadline_s > 0:
            raise ValueError(f"deadline_s must be positive, not {deadline_s}")
        self.url = url
        self.client = Client(url, token, retries=retries)
        self.client_name = client
        self.priority = priority
        self.deadline_s = float(deadline_s)
        self.cache = cache
        self.options = {k: v for k, v in options.items() if v is not None}

    @property
    def device(self) -> str:
        return f"service {self.url}"

    def evaluate(
        self, task_source: str, candidate_source: str, *, task_name: str = "task"
    ) -> EvalResult:
        return self.evaluate_many([(task_name, task_source, candidate_source)])[0]

    def evaluate_many(self, jobs, *, concurrency: int | None = None) -> list[EvalResult]:
        """Results in the order of ``jobs`` (``(task_name, task_source, candidate_source)``).
        ``concurrency`` is the service's business (its workers' ``--concurrency``) and is
        ignored."""
        specs = [self._spec(*job) for job in jobs]
        batches: list[tuple[dict, int]] = []
        try:
            for chunk in _chunks(specs):
                batches.append((self.client.submit_batch(chunk), len(chunk)))
            return self._results(batches)
        except BaseException:
            # Whatever stopped the wait (the service gone silent, a cancel, the trainer's own
            # interrupt), nothing keeps a GPU busy on tasks no one will read: what is left of
            # each batch is cancelled, as far as the service still answers.
            quick = Client(self.url, self.client.token, retries=0, timeout_s=10.0)
            for reply, _size in batches:
                try:
                    quick.cancel_batch(reply["batch_id"])
                except (ServiceError, OSError):
                    pass
            raise

    def _results(self, batches: list[tuple[dict, int]]) -> list[EvalResult]:
        give_up = time.monotonic() + self.deadline_s + GRACE_S
        results: list[EvalResult] = []
        for reply, size in batches:
            records = self._wait(reply["batch_id"], give_up)
            ids = reply["task_ids"]
            if len(ids) != size:
                raise NotJudged(f"batch {reply['batch_id']}: {len(ids)} task ids for {size} tasks")
            missing = [i for i in ids if i not in records]
            if missing:
                raise NotJudged(f"batch {reply['batch_id']} ended without task {missing[0]}")
            results += [EvalResult.from_json(json.dumps(records[i]["result"])) for i in ids]
        return results

    def _spec(self, task_name: str, task_source: str, candidate_source: str) -> dict:
        return {
            "task_name": task_name,
            "task_source": task_source,
            "candidate_source": candidate_source,
            "options": self.options,
            "client": self.client_name,
            "priority": self.priority,
            "deadline_s": self.deadline_s,
            "cache": self.cache,
        }

    def _wait(self, batch_id: str, give_up: float) -> dict[str, dict]:
        """Every task of the batch, terminal, by id: from the batch's event stream, opened
        again where it broke (each opening reports every task already terminal)."""
        records: dict[str, dict] = {}
        heard = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= give_up:
                raise NotJudged(
                    f"batch {batch_id}: no end after the tasks' deadline ({self.deadline_s} s) "
                    f"and {GRACE_S} s more; is the service at {self.url} up?"
                )
            if now - heard > UNREACHABLE_S:
                raise NotJudged(
                    f"batch {batch_id}: the service at {self.url} gave no sign of life for "
                    f"{UNREACHABLE_S} s (its queue keeps the tasks: they may still be judged)"
                )
            try:
                events = self.client.stream(batch_id, read_timeout_s=60.0, keepalives=True)
                for event in events:
                    heard = time.monotonic()
                    if event["event"] == "task":
                        record = event["data"]
                        if record["state"] == "cancelled":
                            # The batch's results can no longer be whole: stop at once.
                            raise NotJudged(
                                f"task {record['id']} of batch {batch_id} was cancelled before "
                                "a result"
                            )
                        records[record["id"]] = record
                    elif event["event"] == "end":
                        return records
            except urllib.error.HTTPError as e:
                if e.code not in RETRY_STATUS:
                    raise ServiceError(e.code, e.read().decode(errors="replace")) from None
            except OSError:  # refused, reset, or silent past the read timeout: open it again
                pass
            time.sleep(1.0)


def _chunks(specs: list[dict]):
    """Consecutive runs of at most BATCH_TASKS specs and about BATCH_BYTES of JSON."""
    chunk, size = [], 0
    for spec in specs:
        cost = len(json.dumps(spec))
        if chunk and (len(chunk) == BATCH_TASKS or size + cost > BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(spec)
        size += cost
    if chunk:
        yield chunk
