"""The one request loop (`common.serve`) and each process's error reply, over a real channel.

The loop checks every request and reply against the protocol; these tests give it a small
protocol of their own (side `test`), built the way the judge generates the real one."""

import pytest

from crucible_harness import audit, candidate, common, protocol, referee


def echo(msg):
    return {"echo": msg["value"]}


def declined(_msg):
    return {"ok": False, "why": "declined"}


def broken(_msg):
    raise ValueError("broken handler")


def escape(_msg):
    raise SystemExit(3)


def plain_error(exc, msg):
    return {"ok": False, "op": msg.get("op"), "type": type(exc).__name__, "text": str(exc)}


HANDLERS = {"echo": echo, "declined": declined, "broken": broken, "escape": escape}


def request(op, **fields):
    properties = {"op": {"const": op, "type": "string"}, **fields}
    return {"additionalProperties": False, "properties": properties, "required": list(properties), "type": "object"}


def reply(**fields):
    return {"additionalProperties": False, "properties": fields, "required": list(fields), "type": "object"}


TEST_PROTOCOL = {
    "test": {
        "request": {
            "oneOf": [
                request("echo", value={"type": "integer"}),
                request("declined"),
                request("broken"),
                request("escape"),
                request("liar"),
            ]
        },
        "replies": {
            "echo": reply(echo={"type": "integer"}),
            "declined": reply(),
            "broken": reply(),
            "escape": reply(),
            "liar": reply(echo={"type": "integer"}),
        },
        # Each process's own failure shape is checked by the real protocol's tests.
        "failure": {"type": "object"},
    }
}


def liar(_msg):
    return {"echo": "not a number"}


HANDLERS = {"echo": echo, "declined": declined, "broken": broken, "escape": escape, "liar": liar}


@pytest.fixture(autouse=True)
def test_protocol(monkeypatch):
    monkeypatch.setattr(protocol, "_DOCUMENT", TEST_PROTOCOL)


def serve(pipe, *requests, on_error=plain_error, catch=Exception):
    """Serves `requests`, then the judge closes the channel, which ends the process quietly."""
    pipe.send(*requests)
    pipe.judge.shutdown(1)  # SHUT_WR: the judge is gone
    with pytest.raises(SystemExit) as stop:
        common.serve(pipe.channel, HANDLERS, on_error, "test", catch=catch)
    assert stop.value.code == 0
    return pipe.replies()


def test_success_is_marked_once_and_failures_pass_through(pipe):
    replies = serve(pipe, {"op": "echo", "value": 5}, {"op": "declined"})
    assert replies == [{"ok": True, "echo": 5}, {"ok": False, "why": "declined"}]


def test_an_exception_becomes_the_error_reply(pipe):
    replies = serve(pipe, {"op": "broken"}, {"op": "echo", "value": 1})
    assert replies == [
        {"ok": False, "op": "broken", "type": "ValueError", "text": "broken handler"},
        {"ok": True, "echo": 1},
    ]


def test_an_unknown_op_is_an_error_reply_not_a_crash(pipe):
    unknown, missing, exit_ = serve(pipe, {"op": "nope"}, {"value": 1}, {"op": "exit"})
    assert unknown["type"] == missing["type"] == exit_["type"] == "UnknownOp"
    assert unknown["text"] == "unknown op 'nope' (this process serves: broken, declined, echo, escape, liar)"
    assert missing["text"].startswith("unknown op None")


def test_a_request_that_breaks_the_protocol_is_refused_before_its_handler_runs(pipe):
    missing, extra, mistyped = serve(
        pipe, {"op": "echo"}, {"op": "echo", "value": 1, "more": 2}, {"op": "echo", "value": "1"}
    )
    assert all(r["type"] == "ProtocolError" for r in (missing, extra, mistyped))
    assert missing["text"] == "$: missing field(s) value"
    assert extra["text"] == "$: unexpected field(s) more"
    assert mistyped["text"].startswith("$.value: expected integer, got str")


def test_a_reply_that_breaks_the_protocol_is_never_sent(pipe):
    (lie,) = serve(pipe, {"op": "liar"})
    assert lie["type"] == "ProtocolError"
    assert lie["text"].startswith("$.echo: expected integer")


def test_catch_decides_which_exceptions_become_replies(pipe):
    pipe.send({"op": "escape"})
    with pytest.raises(SystemExit) as stop:
        common.serve(pipe.channel, HANDLERS, plain_error, "test")
    assert stop.value.code == 3  # the handler's own exit, not a reply
    replies = serve(pipe, {"op": "escape"}, catch=BaseException)
    assert replies == [{"ok": False, "op": "escape", "type": "SystemExit", "text": "3"}]


# --- each process's error shape -----------------------------------------------------------------


def test_referee_errors_are_infrastructure_faults(pipe):
    broken_reply, unknown = serve(pipe, {"op": "broken"}, {"op": "nope"}, on_error=referee.failure)
    assert set(broken_reply) == {"ok", "error", "traceback"}
    assert broken_reply["ok"] is False
    assert broken_reply["error"] == "ValueError: broken handler"
    assert 'raise ValueError("broken handler")' in broken_reply["traceback"]
    assert unknown["error"].startswith("UnknownOp: unknown op 'nope'")


def test_candidate_errors_are_charged_and_classified(pipe):
    broken_reply, unknown, escaped = serve(
        pipe,
        {"op": "broken"},
        {"op": "nope"},
        {"op": "escape"},
        on_error=lambda exc, msg: candidate.request_failure(exc, msg, None),
        catch=BaseException,
    )
    assert set(broken_reply) == {"ok", "class", "message"}
    assert broken_reply["ok"] is False
    assert broken_reply["class"] == "runtime_error"
    assert broken_reply["message"].startswith("ValueError: broken handler")
    assert unknown["message"].startswith("UnknownOp: unknown op 'nope'")
    assert escaped["message"].startswith("SystemExit: 3")


def test_audit_errors_name_the_audit_stage(pipe):
    broken_reply, unknown = serve(pipe, {"op": "broken"}, {"op": "nope"}, on_error=audit.failure)
    assert set(broken_reply) == {"ok", "stage", "error", "traceback", "restart"}
    assert broken_reply["ok"] is False
    assert broken_reply["stage"] == "audit"
    assert broken_reply["restart"] is False
    assert broken_reply["error"] == "ValueError: broken handler"
    assert unknown["error"].startswith("UnknownOp: unknown op 'nope'")
