"""The module sandbox: a pool of worker processes that parse untrusted StableHLO modules.

jaxlib's MLIR reader is not safe against hostile input: a module nested 10,000 deep, or a few
mutated bytes of real bytecode, kill or hang the process that parses it. So module bytes from
an archive are parsed first in a worker (``_sandbox_worker.py``: jaxlib only, no jax), with an
address-space limit it sets itself and a time limit the parent enforces by killing it; only
modules the worker parsed under the same jaxlib are ever parsed by the caller (when jax calls
them). Workers are spawned on first need, reused, and replaced when one dies or times out.

The module's bytes reach the worker through one copy: the parent writes them to the worker's
own scratch file (in ``/dev/shm`` where there is one) and the worker maps it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from jaxport import _children
from jaxport._environ import worker_environment

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "ModuleRefused",
    "Sandbox",
    "SandboxFailure",
    "default_sandbox",
    "default_timeout",
]

#: A worker's address-space limit (``RLIMIT_AS``), bytes: jaxlib's MLIR on a module of a few
#: hundred MB needs a few GiB.
DEFAULT_MEMORY_LIMIT = 8 << 30
#: The time a worker gets to start (import jaxlib), seconds.
START_TIMEOUT = 60.0
_WORKER = Path(__file__).with_name("_sandbox_worker.py")


def default_timeout(nbytes: int) -> float:
    """Seconds a module of ``nbytes`` bytes may take to parse: ``$JAXPORT_SANDBOX_TIMEOUT`` if
    set (a number of seconds, for every module), else 20 s plus 1 s per 8 MB."""
    configured = os.environ.get("JAXPORT_SANDBOX_TIMEOUT")
    if configured:
        try:
            return max(0.0, float(configured))
        except ValueError:
            pass  # not a number: the default (a typo must not disable the limit)
    return 20.0 + nbytes / 8e6


class ModuleRefused(Exception):
    """The worker parsed the bytes and MLIR refused them (a parse error): deterministic."""


class SandboxFailure(Exception):
    """The worker died or ran out of time on a module; ``what`` says which (e.g. SIGSEGV)."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


@dataclasses.dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    scratch: Path
    jaxlib_version: str

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(OSError):
            self.scratch.unlink()


class Sandbox:
    """A pool of at most ``size`` module-parsing workers of ``python``.

    Thread-safe: each call takes an idle worker (starting one if fewer than ``size`` run) and
    gives it back afterwards; a worker that died or timed out is discarded and replaced on the
    next need.
    """

    def __init__(
        self,
        *,
        size: int = 2,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        python: str = sys.executable,
    ):
        self.size = size
        self.memory_limit = memory_limit
        self.python = python
        self._idle: list[_Worker] = []
        self._running = 0
        self._cond = threading.Condition()
        self._scratch_dir: Path | None = None
        self.started = 0  # workers started so far, for tests and benchmarks

    def parse(self, data: bytes | memoryview, *, timeout: float) -> Any:
        """The facts (``_sandbox_worker.facts_of``) of the module ``data``, and the jaxlib version.

        Returns:
            ``(facts, jaxlib_version)``: facts as the worker's JSON dict.

        Raises:
            ModuleRefused: MLIR cannot read the bytes, or they are not MLIR bytecode.
            SandboxFailure: the worker crashed (a signal, the memory limit), did not answer
                within ``timeout`` seconds, or could not start.
        """
        try:
            with self._worker() as worker:
                reply = self._ask(worker, data, timeout)
        except OSError as e:  # no scratch space, no process: not the module's fault
            raise SandboxFailure(f"the sandbox could not run: {e}") from None
        if reply.get("ok"):
            return reply["facts"], worker.jaxlib_version
        raise ModuleRefused(str(reply.get("error", "")))

    def jaxlib_version(self) -> str:
        """The jaxlib version the workers run (starting one if none has started)."""
        with self._worker() as worker:
            return worker.jaxlib_version

    def close(self) -> None:
        """Stops every idle worker (busy ones stop when given back)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._running -= len(idle)
        for worker in idle:
            worker.kill()

    @contextlib.contextmanager
    def _worker(self) -> Iterator[_Worker]:
        worker = self._take()
        try:
            yield worker
        finally:  # a refusal leaves the worker healthy; a crash or time-out has killed it
            self._give_back(worker, worker.alive)

    def _take(self) -> _Worker:
        with self._cond:
            while True:
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive:
                        return worker
                    self._running -= 1
                    worker.kill()
                if self._running < self.size:
                    self._running += 1
                    break
                self._cond.wait()
        try:
            return self._start()
        except BaseException:
            with self._cond:
                self._running -= 1
                self._cond.notify()
            raise

    def _give_back(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._cond:
            if healthy:
                self._idle.append(worker)
            else:
                self._running -= 1
            self._cond.notify()

    def _start(self) -> _Worker:
        scratch = Path(tempfile.mkstemp(prefix="module-", dir=self._scratch())[1])
        process = _children.spawn(  # dies with this process
            [self.python, "-I", str(_WORKER), str(self.memory_limit)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # MLIR's diagnostics of hostile modules, not for users
            env=worker_environment(),
            start_new_session=True,  # a ^C in the terminal is the caller's to handle
        )
        worker = _Worker(process, scratch, "")
        line = _read_line(process, START_TIMEOUT)
        if line is None:
            worker.kill()
            raise SandboxFailure(f"the worker did not start ({_death(process)})")
        worker.jaxlib_version = str(json.loads(line)["jaxlib_version"])
        self.started += 1
        return worker

    def _scratch(self) -> Path:
        if self._scratch_dir is None or not self._scratch_dir.is_dir():
            shm = Path("/dev/shm")
            base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
            self._scratch_dir = Path(tempfile.mkdtemp(prefix="jaxport-sandbox-", dir=base))
        return self._scratch_dir

    def _ask(self, worker: _Worker, data: bytes | memoryview, timeout: float) -> Any:
        with open(worker.scratch, "r+b") as f:
            f.truncate(0)
            f.write(data)
        request = {"path": str(worker.scratch), "size": len(data), "deadline": timeout}
        stdin = worker.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError:
            raise SandboxFailure(_death(worker.process)) from None
        line = _read_line(worker.process, timeout)
        if line is None:
            what = _death(worker.process, timeout)
            worker.kill()
            raise SandboxFailure(what)
        with contextlib.suppress(OSError):  # the module's copy is not kept beyond its parse
            os.truncate(worker.scratch, 0)
        try:
            reply = json.loads(line)
            if isinstance(reply, dict):
                return reply
        except ValueError:
            pass
        worker.kill()
        raise SandboxFailure("the worker gave an unreadable answer")


def _read_line(process: subprocess.Popen[bytes], timeout: float) -> bytes | None:
    """One line from the worker within ``timeout`` seconds, or None (it died or took longer)."""
    stdout: IO[bytes] | None = process.stdout
    assert stdout is not None
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as sel:
        sel.register(stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return b"".join(chunks)


def _death(process: subprocess.Popen[bytes], timeout: float | None = None) -> str:
    """What happened to a worker that gave no answer."""
    try:
        code = process.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout:g} s" if timeout is not None else "no answer"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"the worker was killed by {signal.Signals(-code).name}"
        return f"the worker was killed by signal {-code}"
    if code == 1:  # Python's exit on an uncaught MemoryError under the address-space limit
        return "the worker exited with status 1 (its memory limit, or an internal error)"
    return f"the worker exited with status {code}"


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process's shared pool (2 workers), started on first need, stopped at exit."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox()
            atexit.register(_DEFAULT.close)
        return _DEFAULT
