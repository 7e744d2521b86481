"""The one request loop (`common.serve`) and each process's error reply, over a real channel."""

import pytest

from crucible_harness import audit, candidate, common, referee


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


def test_success_is_marked_once_and_failures_pass_through(pipe):
    pipe.send({"op": "echo", "value": 5}, {"op": "declined"}, {"op": "exit"})
    common.serve(pipe.channel, HANDLERS, plain_error)
    assert pipe.replies() == [{"ok": True, "echo": 5}, {"ok": False, "why": "declined"}]


def test_an_exception_becomes_the_error_reply(pipe):
    pipe.send({"op": "broken"}, {"op": "echo", "value": 1}, {"op": "exit"})
    common.serve(pipe.channel, HANDLERS, plain_error)
    assert pipe.replies() == [
        {"ok": False, "op": "broken", "type": "ValueError", "text": "broken handler"},
        {"ok": True, "echo": 1},
    ]


def test_an_unknown_op_is_an_error_reply_not_a_crash(pipe):
    pipe.send({"op": "nope"}, {"value": 1}, {"op": "exit"})
    common.serve(pipe.channel, HANDLERS, plain_error)
    unknown, missing = pipe.replies()
    assert unknown["type"] == missing["type"] == "UnknownOp"
    assert unknown["text"] == "unknown op 'nope' (this process serves: broken, declined, echo, escape, exit)"
    assert missing["text"].startswith("unknown op None")


def test_exit_ends_the_loop_and_later_requests_are_not_read(pipe):
    pipe.send({"op": "exit"}, {"op": "echo", "value": 1})
    assert common.serve(pipe.channel, HANDLERS, plain_error) is None
    assert pipe.replies() == []


def test_a_closed_channel_ends_the_process_quietly(pipe):
    pipe.send({"op": "echo", "value": 2})
    pipe.judge.shutdown(1)  # SHUT_WR: the judge is gone
    with pytest.raises(SystemExit) as stop:
        common.serve(pipe.channel, HANDLERS, plain_error)
    assert stop.value.code == 0
    assert pipe.replies() == [{"ok": True, "echo": 2}]


def test_catch_decides_which_exceptions_become_replies(pipe):
    pipe.send({"op": "escape"})
    with pytest.raises(SystemExit):
        common.serve(pipe.channel, HANDLERS, plain_error)
    pipe.send({"op": "escape"}, {"op": "exit"})
    common.serve(pipe.channel, HANDLERS, plain_error, catch=BaseException)
    assert pipe.replies() == [{"ok": False, "op": "escape", "type": "SystemExit", "text": "3"}]


# --- each process's error shape -----------------------------------------------------------------


def test_referee_errors_are_infrastructure_faults(pipe):
    pipe.send({"op": "broken"}, {"op": "nope"}, {"op": "exit"})
    common.serve(pipe.channel, HANDLERS, referee.failure)
    broken_reply, unknown = pipe.replies()
    assert set(broken_reply) == {"ok", "error", "traceback"}
    assert broken_reply["ok"] is False
    assert broken_reply["error"] == "ValueError: broken handler"
    assert 'raise ValueError("broken handler")' in broken_reply["traceback"]
    assert unknown["error"].startswith("UnknownOp: unknown op 'nope'")


def test_candidate_errors_are_charged_and_classified(pipe):
    pipe.send({"op": "broken", "stage": "correctness_0"}, {"op": "nope"}, {"op": "escape"}, {"op": "exit"})
    common.serve(
        pipe.channel, HANDLERS, lambda exc, msg: candidate.request_failure(exc, msg, None), catch=BaseException
    )
    broken_reply, unknown, escaped = pipe.replies()
    assert set(broken_reply) == {"ok", "stage", "class", "message"}
    assert broken_reply["ok"] is False
    assert broken_reply["stage"] == "correctness_0"  # the judge's stage, when the request names one
    assert broken_reply["class"] == "runtime_error"
    assert broken_reply["message"].startswith("ValueError: broken handler")
    assert unknown["stage"] == "nope"  # else the op
    assert unknown["message"].startswith("UnknownOp: unknown op 'nope'")
    assert escaped["message"].startswith("SystemExit: 3")


def test_audit_errors_name_the_audit_stage(pipe):
    pipe.send({"op": "broken"}, {"op": "nope"}, {"op": "exit"})
    common.serve(pipe.channel, HANDLERS, audit.failure)
    broken_reply, unknown = pipe.replies()
    assert set(broken_reply) == {"ok", "stage", "error", "traceback"}
    assert broken_reply["ok"] is False
    assert broken_reply["stage"] == "audit"
    assert broken_reply["error"] == "ValueError: broken handler"
    assert unknown["error"].startswith("UnknownOp: unknown op 'nope'")
