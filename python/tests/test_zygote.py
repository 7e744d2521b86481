"""The referee zygote's request reader: descriptors go to the fork requests that carried them,
however a read splits or joins the requests on the stream."""

import array
import json
import os
import socket

import pytest

from crucible_harness import zygote


def send(sock, msg, fds=()):
    data = json.dumps(msg).encode() + b"\n"
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(data)


def inode(fd):
    return os.fstat(fd).st_ino


def test_a_release_read_together_with_a_fork_leaves_the_fork_its_descriptors():
    judge, zyg = socket.socketpair()
    pipes = [os.pipe() for _ in range(6)]
    first, second = [r for r, _ in pipes[:3]], [r for r, _ in pipes[3:]]
    try:
        # Sent before anything reads them: one read can return all four requests at once.
        send(judge, {"op": "release", "pid": 1})
        send(judge, {"op": "fork", "cwd": "/", "env": {}}, first)
        send(judge, {"op": "release", "pid": 2})
        send(judge, {"op": "fork", "cwd": "/", "env": {}}, second)
        requests = zygote.Requests(zyg)
        got = []
        while len(got) < 4:
            msg = requests.next(1.0)
            assert msg is not None
            fds = requests.take_fds() if msg["op"] == "fork" else []
            got.append((msg["op"], [inode(fd) for fd in fds]))
            for fd in fds:
                os.close(fd)
        assert got == [
            ("release", []),
            ("fork", [inode(fd) for fd in first]),
            ("release", []),
            ("fork", [inode(fd) for fd in second]),
        ]
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
        judge.close()
        zyg.close()


def test_a_fork_request_without_its_descriptors_ends_the_zygote():
    judge, zyg = socket.socketpair()
    try:
        send(judge, {"op": "fork", "cwd": "/", "env": {}})
        requests = zygote.Requests(zyg)
        assert requests.next(1.0)["op"] == "fork"
        with pytest.raises(SystemExit, match="0 descriptors"):
            requests.take_fds()
    finally:
        judge.close()
        zyg.close()
