"""Client / AsyncClient against a live `crucible serve` (the real binary, a loopback port, a
temporary SQLite store, one CPU worker) on builtin tasks; and the client's requests against the
served OpenAPI document."""

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import crucible
import pytest
from conftest import REPO, solution
from crucible.client import AsyncClient, Client, ServiceError, task_spec
from crucible.scoring import KernelScorer

TOKEN = "test-token-123"
# An honest ReLU whose `forward` then sleeps: it passes the static verifier (a candidate without a
# Triton kernel is rejected in a millisecond, before any cancel could find it) and stays in its
# first trial until cancelled.
SLOW = (REPO / "crates/crucible-judge/tests/fixtures/slow_relu.py").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`crucible serve` as a child process; stopped (SIGTERM, then kill) on exit."""

    def __init__(self, cli: str, tmp, port: int):
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(tmp / "serve.log", "w")  # noqa: SIM115 (closed in stop)
        cmd = [
            cli,
            "serve",
            "--queue",
            f"sqlite://{tmp / 'queue.db'}",
            "--bind",
            f"127.0.0.1:{port}",
            "--token",
            TOKEN,
            "--workers",
            "1",
            # One evaluation at a time, so a second task waits in the queue behind a running one.
            "--concurrency",
            "1",
            "--devices",
            "cpu",
            "--drain-secs",
            "2",
        ]
        env = {**os.environ, "CRUCIBLE_PYTHON": crucible.judge_python()}
        env.pop("CRUCIBLE_TOKEN", None)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"crucible serve exited {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.2)
        raise TimeoutError("crucible serve did not become ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def server(cli, tmp_path_factory):
    srv = Server(cli, tmp_path_factory.mktemp("serve"), free_port())
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return Client(server.url, TOKEN, retries=2)


def relu_spec(candidate: str | None = None, **fields) -> dict:
    task = crucible.builtin_tasks()["01_relu"]
    fields.setdefault("options", {"trials": 1})
    return task_spec("01_relu", task, candidate or solution("01_relu"), **fields)


def test_requests_match_the_served_openapi_document(client):
    doc = client.openapi()
    schemas = doc["components"]["schemas"]
    submission = schemas["TaskSubmission"]
    assert set(relu_spec(priority=1, labels={"a": 1}, cache=False)) <= set(submission["properties"])
    assert set(submission["required"]) <= set(relu_spec())
    for path in (
        "/v1/tasks",
        "/v1/batches",
        "/v1/tasks/{id}",
        "/v1/tasks/{id}/cancel",
        "/v1/batches/{id}",
        "/v1/batches/{id}/cancel",
        "/v1/batches/{id}/events",
    ):
        assert path in doc["paths"], path
    assert set(schemas["BatchSubmitted"]["required"]) == {"batch_id", "task_ids"}
    assert {"id", "cancelled", "state"} <= set(schemas["CancelOutcome"]["required"])
    assert {"id", "cancelled", "counts"} <= set(schemas["BatchCancelOutcome"]["required"])


def test_submit_and_wait_gives_the_judges_result(client):
    task_id = client.submit(**_args(relu_spec()))
    record = client.wait(task_id, timeout_s=300)
    assert record["state"] == "done" and record["id"] == task_id
    result = crucible.EvalResult.from_json(json.dumps(record["result"]))
    assert result.verdict == "correct" and result.task_name == "01_relu"
    # The service's result scores like the in-process judge's.
    assert crucible.Recipe("tiered").reward(record["result"]) is not None


def test_long_poll_returns_when_the_task_is_terminal(client):
    task_id = client.submit(**_args(relu_spec(candidate="def broken(:\n")))
    t0 = time.monotonic()
    record = client.task(task_id, wait_s=120)
    assert record["state"] == "done", record["state"]
    assert time.monotonic() - t0 < 120
    assert record["result"]["verdict"] == "compile_error"


def test_a_passed_deadline_is_a_timeout_with_no_reward(client):
    # Past its deadline before any worker could start it: the service's `timeout`, which says
    # nothing of the candidate, so no recipe scores it (like an `infra_error`).
    task_id = client.submit(**_args(relu_spec(deadline_s=0.001, cache=False)))
    record = client.wait(task_id, timeout_s=60)
    assert record["state"] == "timeout" and record["result"]["verdict"] == "timeout", record
    assert record["result"]["failure"]["stage"] == "queue"
    for recipe in crucible.RECIPES:
        assert crucible.Recipe(recipe).reward(record["result"]) is None, recipe


def test_batch_submit_and_stream(client):
    specs = [relu_spec(), relu_spec(candidate=solution("02_gelu_tanh", "wrong"))]
    reply = client.submit_batch(specs)
    assert len(reply["task_ids"]) == 2
    events = list(client.stream(reply["batch_id"]))
    tasks = [e["data"] for e in events if e["event"] == "task"]
    assert sorted(t["id"] for t in tasks) == sorted(reply["task_ids"])
    assert events[-1]["event"] == "end" and events[-1]["data"]["done"] == 2
    batch = client.batch(reply["batch_id"])
    assert batch["finished"] and batch["counts"]["done"] == 2
    verdicts = {t["id"]: t["result"]["verdict"] for t in batch["tasks"]}
    assert verdicts[reply["task_ids"][0]] == "correct"
    assert verdicts[reply["task_ids"][1]] != "correct"


def test_cancel(client):
    # The slow candidate occupies the worker's one slot; the second waits in the queue and is
    # cancelled there, then the running one is cancelled mid-trial.
    busy = client.submit(**_args(relu_spec(candidate=SLOW, cache=False)))
    deadline = time.monotonic() + 60
    while client.task(busy)["state"] != "running":
        assert time.monotonic() < deadline, client.task(busy)
        time.sleep(0.1)
    queued = client.submit(**_args(relu_spec(candidate=SLOW + "\n# 2\n", cache=False)))
    assert client.task(queued)["state"] == "queued"
    outcome = client.cancel(queued)
    assert outcome == {"id": queued, "cancelled": True, "state": "cancelled"}
    assert client.task(queued)["state"] == "cancelled"
    assert client.cancel(busy)["cancelled"] is True
    assert client.wait(busy, timeout_s=60)["state"] == "cancelled"
    again = client.cancel(queued)
    assert again["cancelled"] is False and again["state"] == "cancelled"


def test_cancel_batch(client):
    # Two slow candidates on one slot: the first runs (mid-trial), the second waits; one call
    # cancels both, and the worker is free for the next task.
    specs = [relu_spec(candidate=SLOW + f"\n# batch {i}\n", cache=False) for i in range(2)]
    reply = client.submit_batch(specs)
    running, queued = reply["task_ids"]
    deadline = time.monotonic() + 60
    while client.task(running)["state"] != "running":
        assert time.monotonic() < deadline, client.task(running)
        time.sleep(0.1)
    assert client.task(queued)["state"] == "queued"
    outcome = client.cancel_batch(reply["batch_id"])
    assert outcome["id"] == reply["batch_id"] and outcome["cancelled"] == 2, outcome
    assert outcome["counts"]["cancelled"] == 2 and outcome["counts"]["running"] == 0, outcome
    assert client.wait(running, timeout_s=60)["state"] == "cancelled"
    assert client.cancel_batch(reply["batch_id"])["cancelled"] == 0
    record = client.wait(
        client.submit(**_args(relu_spec(candidate="def broken(:\n"))), timeout_s=120
    )
    assert record["result"]["verdict"] == "compile_error"
    with pytest.raises(ServiceError) as e:
        client.cancel_batch("01234567-89ab-cdef-0123-456789abcdef")
    assert e.value.status == 404


def _jobs():
    tasks = crucible.builtin_tasks()
    return [
        ("01_relu", tasks["01_relu"], solution("01_relu")),
        ("02_gelu_tanh", tasks["02_gelu_tanh"], solution("02_gelu_tanh", "wrong")),
        ("16_swish", tasks["16_swish"], "def broken(:\n"),
    ]


def test_service_judge_gives_the_in_process_judges_verdicts(server, judge):
    remote = crucible.make_judge(service=server.url, token=TOKEN, trials=2, seed=7, cache=False)
    got, local = remote.evaluate_many(_jobs()), judge.evaluate_many(_jobs())
    assert [r.verdict for r in got] == ["correct", "incorrect", "compile_error"]
    assert [r.verdict for r in got] == [r.verdict for r in local]
    # Same seed, same CPU: the same trials, element for element.
    assert [r.to_dict()["trials"] for r in got] == [r.to_dict()["trials"] for r in local]
    one = remote.evaluate(*_jobs()[0][1:], task_name="01_relu")
    assert one.verdict == "correct" and one.task_name == "01_relu"


def test_trainer_rewards_through_the_service(server, judge):
    from crucible.integrations.trl import KernelReward

    names = [name for name, _task, _code in _jobs()] + ["16_swish"]
    completions = [f"```python\n{code}\n```" for _name, _task, code in _jobs()] + ["no code"]
    remote = KernelReward(service=server.url, token=TOKEN, recipe="tiered", trials=2, seed=7)
    local = KernelReward(judge=judge, recipe="tiered")
    rewards = remote(task=names, completions=completions)
    assert rewards == local(task=names, completions=completions)
    assert rewards[-1] == remote.recipe.void_reward and remote.summary()["verdict/correct"] == 1


def test_verl_reward_function_through_the_service(server, judge, monkeypatch):
    from crucible.integrations import verl

    monkeypatch.setenv("CRUCIBLE_SERVICE", server.url)
    monkeypatch.setenv("CRUCIBLE_TOKEN", TOKEN)
    monkeypatch.setattr(verl, "_scorer", None)
    assert isinstance(verl.scorer().judge, crucible.ServiceJudge)
    completion = f"```python\n{solution('01_relu')}\n```"
    score = verl.compute_score("kernels", completion, "01_relu")
    assert score == KernelScorer(judge=judge).score(["01_relu"], [completion])[0]
    assert verl.scorer().summary()["verdict/correct"] == 1


def test_verifiers_episode_through_the_service(server, monkeypatch):
    from chat_stub import ChatStub
    from crucible.integrations import verifiers_env as ve
    from test_verifiers_env import fenced, run_episode

    monkeypatch.setenv("CRUCIBLE_TOKEN", TOKEN)
    env = ve.load_environment(["16_swish"], max_turns=2, service=server.url, trials=2)
    replies = [fenced(solution("02_gelu_tanh", "wrong")), fenced(solution("16_swish"))]
    with ChatStub(replies) as stub:
        episode = run_episode(env, stub.url, "16_swish", monkeypatch)
    assert episode.ok, episode.errors
    assert isinstance(env.scorer.judge, crucible.ServiceJudge)
    [trace] = episode.traces
    assert [t["verdict"] for t in trace.info["crucible_turns"]] == ["runtime_error", "correct"]


def test_verifiers_episode_fails_on_a_passed_deadline(server, monkeypatch):
    from chat_stub import ChatStub
    from crucible.integrations import verifiers_env as ve
    from test_verifiers_env import fenced, run_episode

    late = crucible.ServiceJudge(server.url, TOKEN, deadline_s=0.001, cache=False)
    env = ve.load_environment(["16_swish"], judge=late, max_turns=2)
    with ChatStub([fenced(solution("16_swish"))]) as stub:
        episode = run_episode(env, stub.url, "16_swish", monkeypatch)
    assert not episode.ok
    [error] = episode.errors
    assert "InfraErrorNoReward" in error.message and "deadline" in error.message


def test_service_judge_past_deadline_and_cancelled_are_never_scored(server, client):
    late = crucible.ServiceJudge(server.url, TOKEN, deadline_s=0.001, cache=False)
    result = late.evaluate(*_jobs()[0][1:], task_name="01_relu")
    assert result.verdict == "timeout" and not result.infra_error
    assert crucible.Recipe("tiered").reward(result) is None
    # A task cancelled from outside has no result at all: NotJudged, never a made-up verdict.
    slow = crucible.ServiceJudge(server.url, TOKEN, cache=False)
    raised = []
    worker = threading.Thread(
        target=lambda: raised.append(
            _raises(
                slow.evaluate_many,
                [
                    ("01_relu", crucible.builtin_tasks()["01_relu"], SLOW + f"\n# {i}\n")
                    for i in range(2)
                ],
            )
        ),
        daemon=True,  # a failed test leaves no thread waiting on the service
    )
    worker.start()
    deadline = time.monotonic() + 60
    while True:
        # A worker's heartbeat may still list an earlier test's task for a moment.
        in_flight = [t["task"] for w in client.workers() for t in w["in_flight"]]
        busy = [t for t in in_flight if client.task(t)["state"] == "running"]
        if busy:
            break
        assert time.monotonic() < deadline, "the slow task never ran"
        time.sleep(0.1)
    # Two tasks in one batch: the slow one running, its twin queued behind it (one slot).
    client.cancel(busy[0])
    worker.join(60)
    assert isinstance(raised[0], crucible.NotJudged) and "cancelled" in str(raised[0]), raised
    # What was left of the batch is cancelled too: the service does no work no one will read.
    twin = client.batch(client.task(busy[0])["batch"])
    assert twin["counts"]["cancelled"] == 2 and twin["finished"], twin["counts"]


def test_service_judge_gives_up_on_a_service_gone_silent(cli, tmp_path, monkeypatch):
    import crucible.service

    monkeypatch.setattr(crucible.service, "UNREACHABLE_S", 2.0)
    srv = Server(cli, tmp_path, free_port())
    srv.wait_ready()
    judge = crucible.ServiceJudge(srv.url, TOKEN, cache=False, retries=0)
    raised = []
    worker = threading.Thread(
        target=lambda: raised.append(
            _raises(judge.evaluate, crucible.builtin_tasks()["01_relu"], SLOW)
        ),
        daemon=True,
    )
    worker.start()
    time.sleep(3)  # submitted and being judged; then the server goes away
    srv.stop()
    worker.join(60)
    assert isinstance(raised[0], crucible.NotJudged) and "no sign of life" in str(raised[0]), raised


def _raises(call, *args):
    try:
        call(*args)
    except Exception as e:  # noqa: BLE001 (the test inspects it)
        return e
    return None


def test_service_judge_refuses_options_the_service_does_not_take(server):
    with pytest.raises(TypeError, match="stage_timeout"):
        crucible.ServiceJudge(server.url, TOKEN, stage_timeout=5)
    with pytest.raises(TypeError, match="device"):
        crucible.make_judge(service=server.url, device="cuda:0")
    with pytest.raises(TypeError, match="service"):
        crucible.make_judge(token=TOKEN)


def test_workers_and_health(client):
    [worker] = client.workers()
    assert worker["device"] == "cpu" and isinstance(worker["in_flight"], list)
    health = client.health()
    assert health["status"] == "ok" and health["store"] and health["workers_live"] == 1


def test_http_errors_raise_without_retrying(server):
    with pytest.raises(ServiceError) as e:
        Client(server.url, "wrong-token", retries=3).submit(**_args(relu_spec()))
    assert e.value.status == 401
    with pytest.raises(ServiceError) as e:
        Client(server.url, TOKEN).task("no-such-task")
    assert e.value.status == 404


def test_retries_connection_refused_until_the_server_is_up(cli, tmp_path):
    port = free_port()
    started: list[Server] = []

    def start_later():
        time.sleep(1.5)
        started.append(Server(cli, tmp_path, port))

    threading.Thread(target=start_later, daemon=True).start()
    t0 = time.monotonic()
    try:
        task_id = Client(f"http://127.0.0.1:{port}", TOKEN, retries=8).submit(**_args(relu_spec()))
        assert time.monotonic() - t0 >= 1.5, "the first attempts must have been refused"
        assert task_id
    finally:
        for s in started:
            s.stop()
    t0 = time.monotonic()
    with pytest.raises(urllib.error.URLError):
        Client(f"http://127.0.0.1:{free_port()}", TOKEN, retries=2).submit(**_args(relu_spec()))
    assert time.monotonic() - t0 >= 0.6  # backed off 0.2 + 0.4 s between three attempts


def test_async_client(server):
    async def go():
        c = AsyncClient(server.url, TOKEN, retries=2)
        ids = await asyncio.gather(
            c.submit(**_args(relu_spec())),
            c.submit(**_args(relu_spec(candidate="def broken(:\n"))),
        )
        records = await asyncio.gather(*(c.wait(i, timeout_s=300) for i in ids))
        batch = await c.submit_batch([relu_spec()])
        events = [e async for e in c.stream(batch["batch_id"])]
        return records, events

    records, events = asyncio.run(go())
    assert [r["result"]["verdict"] for r in records] == ["correct", "compile_error"]
    assert [e["event"] for e in events] == ["task", "end"]


def _args(spec: dict) -> dict:
    """A TaskSpec as `Client.submit`'s arguments."""
    spec = dict(spec)
    return {
        "task_name": spec.pop("task_name"),
        "task_source": spec.pop("task_source"),
        "candidate_source": spec.pop("candidate_source"),
        **spec,
    }
