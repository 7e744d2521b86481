"""The zygote: a process that has imported what a harness process imports, and forks referees and
candidate processes.

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
- The same with `"sandbox"`: the child becomes a candidate process instead. Once it holds only
  its own descriptors and environment, and before anything of the candidate's is loaded, it
  confines itself by the plan the judge made (`null`: the judge runs without a sandbox) through
  the sandbox crate's cdylib (`$CRUCIBLE_SANDBOX_LIB`), the same code that confines a spawned
  candidate between fork and exec: its namespaces, minimal root, Landlock, seccomp, capabilities
  and limits. What it inherits from this process is the imports.
- `{"op": "release", "pid"}`: the judge is done with that child (no reply). A child that ended
  stays a zombie until it is released, so its pid, and with it its process group id, cannot be
  reused while the judge may still signal the group.

It says hello like every harness process once its imports are done. When the judge goes, its
channel ends and so does this process; its children get `SIGKILL` (their parent-death signal).
"""

import contextlib
import ctypes
import functools
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
import torch
import triton  # noqa: F401

from crucible_harness import candidate, common, referee

# Once here rather than in every referee that compiles the fused statistics (`fused_stats.py`).
common.settle_triton_key()
# Likewise the meta device's imports, for every referee that sizes its trials from shapes.
referee.warm_meta(torch)

# numpy's OpenBLAS starts its thread pool at import; it registers its own fork handlers, and the
# child's pool starts again when used. Python would otherwise warn at every fork.
warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)

# A fork request carries the child's channel, stdout and stderr.
FDS_PER_FORK = 3
PR_SET_PDEATHSIG = 1
# How often released children that have not ended yet are looked at again.
REAP_EVERY_S = 0.5
# The exit status of a forked candidate process that could not confine itself (the spawned
# supervisor's for its own bookkeeping failures is 125 too).
SANDBOX_FAILED = 125


def sandbox_library():
    """The sandbox crate's cdylib, loaded once here (a child would pay the load each time); None
    without one, and then no candidate process is forked."""
    path = os.environ.get("CRUCIBLE_SANDBOX_LIB")
    if not path:
        return None
    # PyDLL: the call keeps the GIL, so the process stays what Python believes it is through the
    # forks inside it (this child is single-threaded; the candidate returns with the GIL held).
    library = ctypes.PyDLL(path)
    enter = library.crucible_sandbox_enter
    enter.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    enter.restype = ctypes.c_int
    return enter


def confine(enter, plan):
    """Confines this process by `plan` (None: no sandbox). With a PID namespace only the candidate
    returns, two forks down; the supervisor and init left behind end with its status."""
    if plan is None:
        return
    if enter is None:
        print("no sandbox library to confine the candidate process with", file=sys.stderr)
        os._exit(SANDBOX_FAILED)
    text = json.dumps(plan).encode()
    error = ctypes.create_string_buffer(4096)
    if enter(text, len(text), error, len(error)) != 0:
        print(f"the candidate process could not be confined: {error.value.decode(errors='replace')}", file=sys.stderr)
        os._exit(SANDBOX_FAILED)


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


def become(zygote_pid, sock, fds, started, cwd, env, confined, main):
    """In the forked child: the process `python -m crucible_harness.referee` (or `.candidate`)
    would have been, `confined` called once it holds only its own descriptors and environment.
    Says on `started` (a pipe's end) when it leads a session of its own. Never returns."""
    status = 1
    try:
        # The zygote's channel object must not close its descriptor once that number may be the
        # child's own.
        sock.detach()
        os.setsid()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != zygote_pid:
            os._exit(1)  # the zygote died before the signal was armed
        os.write(started, b"!")
        os.close(started)
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
        confined()
        status = main() or 0
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
    enter = sandbox_library()
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
        # The reply waits for the child's `setsid`, as a spawn returns only after it: the judge
        # may signal or renice the child's process group (its pid) as soon as it has the pid.
        session_read, session_started = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(session_read)
            child = (zygote_pid, sock, fds, session_started, msg["cwd"], msg["env"])
            if "sandbox" in msg:
                become(*child, functools.partial(confine, enter, msg["sandbox"]), candidate.main)
            become(*child, lambda: None, referee.main)
        os.close(session_started)
        os.read(session_read, 1)  # b"" if the child died first: the judge finds it ended
        os.close(session_read)
        for fd in fds:
            os.close(fd)
        sock.sendall(json.dumps({"ok": True, "pid": pid}).encode() + b"\n")


if __name__ == "__main__":
    sys.exit(main())
