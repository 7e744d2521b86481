"""The referee zygote: a process that has imported what a referee imports, and forks referees.

Every evaluation gets a referee of its own (it holds one evaluation's expected outputs and dies
with it), and an interpreter that imports torch, triton and numpy costs about 4 CPU-seconds on
the H200 host; a child forked from a process that already imported them reaches its first
kernel in 0.4 (`scripts/probe/fork_start.py`). A CUDA context does not survive a fork, so this
process never touches the device: each child brings up its own after the fork.

Trusted: it never runs candidate code, and nothing the candidate can reach names its channel (a
socket pair). The judge drives it over its channel with one JSON object per line:

- `{"op": "fork", "cwd", "env"}`, sent with three file descriptors (SCM_RIGHTS): the child's
  channel, stdout and stderr. The child becomes a referee exactly as if the judge had started
  `python -m crucible_harness.referee` there with that environment. Reply `{"ok": true, "pid"}`.
- `{"op": "release", "pid"}`: the judge is done with that child (no reply). A child that ended
  stays a zombie until it is released, so its pid, and with it its process group id, cannot be
  reused while the judge may still signal the group.

It says hello like every harness process once its imports are done. When the judge goes, its
channel ends and so does this process; its children get `SIGKILL` (their parent-death signal).
"""

import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys
import tempfile
import warnings

# Imported here, once, for every child: this is what the fork saves.
import numpy  # noqa: F401
import torch  # noqa: F401
import triton  # noqa: F401

from crucible_harness import common, referee

# Once here rather than in every referee that compiles the fused statistics (`fused_stats.py`).
common.settle_triton_key()

# numpy's OpenBLAS starts its thread pool at import; it registers its own fork handlers, and the
# child's pool starts again when used. Python would otherwise warn at every fork.
warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)

# A fork request carries the child's channel, stdout and stderr.
FDS_PER_FORK = 3
PR_SET_PDEATHSIG = 1
# How often released children that have not ended yet are looked at again.
REAP_EVERY_S = 0.5


class Requests:
    """Lines from the judge, and the file descriptors that came with the fork requests.

    On a stream socket one read may return the end of one request and the start of the next,
    with the next one's descriptors (a release, which has none, followed by a fork): so the
    descriptors are not tied to the read they came with but queued, and each fork request
    takes the next three, in the order they were sent."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""
        self.fds = []

    def next(self, timeout):
        """The next request, None if none came within `timeout`; exits when the judge closed
        the channel."""
        while b"\n" not in self.buffer:
            if not select.select([self.sock], [], [], timeout)[0]:
                return None
            data, fds, flags, _addr = socket.recv_fds(self.sock, 1 << 16, 3 * FDS_PER_FORK)
            if flags & socket.MSG_CTRUNC:
                raise SystemExit("the zygote lost file descriptors (MSG_CTRUNC)")
            if not data:
                sys.exit(0)
            self.buffer += data
            self.fds.extend(fds)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def take_fds(self):
        """The descriptors of the fork request just read."""
        if len(self.fds) < FDS_PER_FORK:
            raise SystemExit(f"a fork request came with {len(self.fds)} descriptors, not {FDS_PER_FORK}")
        fds, self.fds = self.fds[:FDS_PER_FORK], self.fds[FDS_PER_FORK:]
        return fds


def become_referee(zygote_pid, sock, fds, cwd, env):
    """In the forked child: the process `python -m crucible_harness.referee` would have been.
    Never returns."""
    status = 1
    try:
        # The zygote's channel object must not close its descriptor once that number may be the
        # child's own.
        sock.detach()
        os.setsid()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != zygote_pid:
            os._exit(1)  # the zygote died before the signal was armed
        channel, out, err = fds
        for fd, target in ((out, 1), (err, 2), (channel, common.CHANNEL_FD)):
            os.dup2(fd, target)
        # Nothing of the zygote's stays open: the received descriptors, and whatever the imports
        # opened.
        os.closerange(common.CHANNEL_FD + 1, os.sysconf("SC_OPEN_MAX"))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # read TMPDIR again
        status = referee.main() or 0
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else 0
    except BaseException as exc:  # anything let through would run the zygote's loop in the child
        print(f"the forked referee failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the log may be gone with the judge
                stream.flush()
        os._exit(status)


def reap(released):
    """Reaps the released children that have ended."""
    for pid in list(released):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            released.discard(pid)


def main():
    zygote_pid = os.getpid()
    sock = socket.socket(fileno=common.channel_fd())
    sock.sendall(json.dumps({"ok": True, "ready": True}).encode() + b"\n")
    requests = Requests(sock)
    released = set()
    while True:
        reap(released)
        msg = requests.next(REAP_EVERY_S)
        if msg is None:
            continue
        if msg.get("op") == "release":
            released.add(int(msg["pid"]))
            continue
        if msg.get("op") != "fork":
            # The judge and the zygote disagree: nothing after this can be trusted.
            raise SystemExit(f"unknown request {msg.get('op')!r}")
        fds = requests.take_fds()
        sys.stdout.flush()
        sys.stderr.flush()
        # The imports' objects frozen before the fork: a collection in the child then leaves
        # their pages alone instead of writing each header (copy-on-write), as CPython's `gc`
        # documentation advises for fork without exec; the child freezes its own at its hello.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            become_referee(zygote_pid, sock, fds, msg["cwd"], msg["env"])
        for fd in fds:
            os.close(fd)
        sock.sendall(json.dumps({"ok": True, "pid": pid}).encode() + b"\n")


if __name__ == "__main__":
    sys.exit(main())
