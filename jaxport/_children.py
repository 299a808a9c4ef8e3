"""Every process jaxport starts, started one way: it dies with its parent and has a deadline.

jaxport starts processes to read what it does not trust or cannot bound (the module sandbox's
workers, the jax-native converter, audit workers, rescue children, ``jaxport run``'s call) and
to make managed environments (``uv``/``pip``). Each is started by ``spawn`` (or ``run``), which
gives it two guarantees of its own, enforced by the kernel rather than by the parent's code:

- it dies with its parent: on Linux the child is first a small launcher (``_LAUNCHER``, the
  parent's interpreter without site) that asks for ``SIGKILL`` at its parent's death
  (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``), exits at once if its parent already
  died, and ``exec``s the command. No code runs between ``fork`` and ``exec`` (a
  ``preexec_fn`` would make ``subprocess`` fork a multithreaded jax process, which jax warns
  may deadlock), so ``subprocess`` still uses ``vfork``. Linux sends that signal when the
  *thread* that forked exits, so every child is forked by one long-lived thread of this
  process (``_Spawner``), never by a caller's thread (a server's request thread, an audit's
  feeding thread) that may end before the child's work does;
- a one-shot child (``deadline`` given) has a wall-clock deadline of its own: ``alarm(2)``,
  also kept across ``exec``, kills it (``SIGALRM``) ``DEADLINE_GRACE`` seconds after the
  parent's own time limit, should the parent be stopped or stuck. Long-lived workers (the
  sandbox's, an audit's) set the alarm themselves around each request (``own_deadline``,
  from the time limit the request carries), and idle without one.

On other systems a child's life is bounded by its parent's time limits only. The one
exception to the guarantees is what a child itself starts (``pip``'s build backends): those
are its own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["DEADLINE_GRACE", "MAX_WAIT", "own_deadline", "run", "spawn"]

#: Seconds a one-shot child outlives its parent's time limit before its own alarm kills it.
DEADLINE_GRACE = 5.0
#: The longest time limit ``run`` waits, seconds (23 days: ``poll(2)`` counts milliseconds in
#: an int); a longer one (``--timeout 1e10``) is this one.
MAX_WAIT = 2_000_000.0
#: The launcher: ``PYTHON -I -S -c _LAUNCHER PARENT_PID ALARM_SECONDS CMD...`` asks for
#: SIGKILL at its parent's death (``prctl(PR_SET_PDEATHSIG)``, 1 and 9 in ``<linux/prctl.h>``
#: and ``<signal.h>``), exits if that parent already died, sets the alarm, and ``exec``s CMD
#: (both are kept across ``exec``). A constant: its arguments are never evaluated.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "if int(sys.argv[2]):\n"
    "    signal.alarm(int(sys.argv[2]))\n"
    "try:\n"
    "    os.execv(sys.argv[3], sys.argv[3:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write(f'{sys.argv[3]}: {e.strerror}\\n')\n"
    "    os._exit(127)\n"
)


#: The interpreter that runs the launcher: this process's own.
_PYTHON = sys.executable


def _launched(cmd: Sequence[str], alarm: int, env: Any = None) -> list[str]:
    """``cmd`` behind the launcher where the kernel offers ``PR_SET_PDEATHSIG`` (Linux).

    Raises:
        FileNotFoundError, PermissionError: ``cmd[0]`` is not an executable file (or not on
            ``PATH``), as ``subprocess.Popen`` says it.
    """
    if not sys.platform.startswith("linux") or not _PYTHON:
        return list(cmd)
    import errno
    import shutil

    search = None if env is None else env.get("PATH", os.defpath)  # the child's, as Popen
    program = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0], path=search)
    if program is None or not os.path.isfile(program):  # as Popen would say, before the launch
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cmd[0])
    if not os.access(program, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), cmd[0])
    launcher = [_PYTHON, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), str(alarm)]
    return [*launcher, program, *cmd[1:]]


class _Spawner:
    """One daemon thread, alive as long as the process, that forks every child."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No thread yet (also in a forked copy, whose lock may have been held at the fork)."""
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pid = -1

    def popen(self, cmd: Sequence[str], kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._ensure_thread()
        self._queue.put((list(cmd), kwargs, future))
        return future.result()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked copy of this process
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._serve, name="jaxport-spawner", daemon=True).start()
                self._pid = os.getpid()

    def _serve(self) -> None:
        requests = self._queue
        while True:
            cmd, kwargs, future = requests.get()
            try:
                future.set_result(subprocess.Popen(cmd, **kwargs))
            except BaseException as e:  # handed to the caller, who raises it
                future.set_exception(e)


_SPAWNER = _Spawner()
if hasattr(os, "register_at_fork"):  # a forked copy starts its own thread, with a fresh lock
    os.register_at_fork(after_in_child=_SPAWNER.reset)


def spawn(
    cmd: Sequence[str], *, deadline: float | None = None, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """Starts ``cmd`` (no shell) as ``subprocess.Popen(cmd, **kwargs)`` does, as a child that
    dies with this process and, with ``deadline``, is killed by its own alarm
    ``deadline + DEADLINE_GRACE`` seconds from now.

    Args:
        cmd: the program and its arguments.
        deadline: seconds the caller will wait for it (None: a long-lived worker whose
            requests the caller limits).
        kwargs: ``subprocess.Popen``'s.

    Raises:
        OSError: the program could not be started.
    """
    alarm = 0  # none for a long-lived worker, or a deadline beyond alarm(2)'s range
    if deadline is not None and math.isfinite(deadline) and deadline + DEADLINE_GRACE < 2**31:
        alarm = max(1, math.ceil(deadline + DEADLINE_GRACE))
    return _SPAWNER.popen(_launched(cmd, alarm, kwargs.get("env")), kwargs)


def run(
    cmd: Sequence[str], *, timeout: float, stdin: Any = subprocess.DEVNULL, **kwargs: Any
) -> subprocess.CompletedProcess[bytes]:
    """``cmd`` run to its end by ``spawn``, its stdout and stderr captured, for at most
    ``timeout`` seconds (then killed; at most ``MAX_WAIT``): ``subprocess.run(cmd,
    capture_output=True, timeout=timeout)`` with this module's guarantees.

    Raises:
        subprocess.TimeoutExpired: no end within ``timeout`` seconds (the child is killed).
        OSError: the program could not be started.
    """
    timeout = min(timeout, MAX_WAIT)
    process = spawn(
        cmd, deadline=timeout, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )
    with process:
        try:
            out, err = process.communicate(timeout=timeout)
        except BaseException:  # the time limit, or ^C: the child goes too
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def own_deadline(seconds: Any) -> None:
    """In a long-lived worker, around one request: SIGALRM (which ends the process)
    ``seconds + DEADLINE_GRACE`` from now, the parent's time limit for the request plus the
    grace; None (or not a finite number of seconds) cancels it. A worker whose parent stopped
    watching then still ends."""
    import signal

    finite = isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0
    signal.alarm(min(math.ceil(seconds + DEADLINE_GRACE), 2**31 - 1) if finite else 0)
