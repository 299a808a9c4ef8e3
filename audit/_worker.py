"""Audits in a worker process, so that jaxlib crashing on an archive is a finding, not the death
of the caller.

The parent (``run_audits``) writes each archive (and golden examples) to a private temporary
directory and starts ``PYTHON -P -m jaxport.audit._worker --memory-limit BYTES``, which sets its own
address-space limit (``RLIMIT_AS``) before it imports jax. Its environment is an allow-list
(``jaxport._environ.worker_environment``: what an interpreter and jax need), so no registry URL,
token, password or cloud credential reaches it, nor its command line. The
protocol is JSON lines:

- worker -> parent, once: ``{"jax_version": ..., "jaxlib_version": ...}``
- parent -> worker, per job: ``{"archive": PATH, "examples": PATH or null, "platform": P}``
  (platform null: only read the whole archive, ``_checks.check_archive``)
- worker -> parent, per job: ``{"status": ..., "reason": ..., "checks": {...}, "seconds": S}``
- parent -> worker: ``{"capabilities": true}``; worker -> parent: the jax's capabilities for
  static audits (``_static.Capabilities.to_json``)

A job that kills the worker (a signal, the memory limit) or outlasts ``timeout`` seconds is a
``crash`` finding naming the signal or the limit; a fresh worker takes the remaining jobs.
With ``workers=N`` there are N long-lived workers (each imports jax once and audits many
jobs), each fed by a thread of the parent from one queue; results keep the jobs' order.
"""

from __future__ import annotations

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from jaxport import AuditError, JaxportError, NotFoundError, _children
from jaxport._environ import worker_environment
from jaxport.audit._report import AuditResult

if TYPE_CHECKING:
    from jaxport.audit._static import Capabilities

__all__ = [
    "DEFAULT_JOB_TIMEOUT",
    "DEFAULT_MEMORY_LIMIT",
    "AuditJob",
    "Environment",
    "run_audits",
    "worker_capabilities",
]

#: The address-space limit of a worker, in bytes (jax on CPU needs about 4 GiB of it).
DEFAULT_MEMORY_LIMIT = 16 << 30
_START_TIMEOUT = 120.0
#: Seconds one audit or deep-verify job may take before its worker is killed (``crash``): a
#: module that hangs jaxlib's parser is already stopped by the module sandbox sooner.
DEFAULT_JOB_TIMEOUT = 120.0


#: Archive or examples bytes, or a function that reads them when the job runs (so that only
#: one archive is in memory at a time); it may raise a ``JaxportError`` (an ``error`` result).
Blob = bytes | Callable[[], bytes]


@dataclasses.dataclass(frozen=True)
class AuditJob:
    """One archive to audit for one platform, with its golden examples blob if any; platform
    None: only read the whole archive (``check_archive``)."""

    archive: Blob
    platform: str | None
    examples: Blob | None = None


@dataclasses.dataclass(frozen=True)
class Environment:
    """The jax that audited: ``(jax, jaxlib)`` versions as the worker reported them."""

    jax_version: str
    jaxlib_version: str


def run_audits(
    jobs: Sequence[AuditJob],
    *,
    python: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_JOB_TIMEOUT,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    workers: int = 1,
    progress: Callable[[int, AuditResult], None] | None = None,
) -> tuple[Environment, list[AuditResult]]:
    """Audits ``jobs`` in worker processes of ``python`` (default: this interpreter).

    Args:
        jobs: what to audit.
        python: an interpreter with jaxport installed (another jax release, say).
        timeout: seconds one job may take before its worker is killed.
        memory_limit: each worker's address-space limit in bytes (None: unlimited); applied
            only when every job is for CPU (GPU and TPU runtimes reserve address space far
            beyond memory, so a limit would stop them from starting).
        workers: how many worker processes audit at once (at most one per job; each takes
            about 1 GiB of memory with jax loaded).
        progress: called as ``progress(index, result)`` after each job, from the thread that
            ran it, one call at a time.

    Returns:
        The auditing jax's versions, and one result per job, in the jobs' order.

    Raises:
        NotFoundError: ``python`` does not exist or is not executable.
        AuditError: no worker starts (no jaxport or jax in that environment).
    """
    exe = _interpreter(python)
    if memory_limit is not None and any(j.platform not in (None, "cpu") for j in jobs):
        memory_limit = None  # CUDA and TPU runtimes reserve far more address space than RAM
    lanes = max(1, min(int(workers), len(jobs)))
    with tempfile.TemporaryDirectory(prefix="jaxport-audit-") as tmp:
        queue = _Queue(jobs, progress)
        if lanes == 1:
            _lane(exe, Path(tmp), memory_limit, timeout, queue)
        else:
            threads = [
                threading.Thread(
                    target=_lane_catching,
                    args=(exe, Path(tmp) / f"w{k}", memory_limit, timeout, queue),
                )
                for k in range(lanes)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return queue.outcome()


class _Queue:
    """The jobs the lanes share: which comes next, the results, the first environment."""

    def __init__(
        self, jobs: Sequence[AuditJob], progress: Callable[[int, AuditResult], None] | None
    ):
        self.jobs = jobs
        self._progress = progress
        self._next = 0
        self._results: list[AuditResult | None] = [None] * len(jobs)
        self._env: Environment | None = None
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.reading = threading.Lock()  # one blob read at a time (the registry's engine)

    def take(self) -> int | None:
        with self._lock:
            if self._next >= len(self.jobs):
                return None
            self._next += 1
            return self._next - 1

    def started(self, env: Environment) -> None:
        with self._lock:
            self._env = self._env or env

    def finish(self, index: int, result: AuditResult) -> None:
        with self._lock:
            self._results[index] = result
            if self._progress is not None:
                self._progress(index, result)

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self._errors.append(error)

    def outcome(self) -> tuple[Environment, list[AuditResult]]:
        done = [r for r in self._results if r is not None]
        if self._errors and (self._env is None or len(done) < len(self.jobs)):
            raise self._errors[0]
        assert self._env is not None and len(done) == len(self.jobs)
        return self._env, done


def _lane_catching(
    exe: str, tmp: Path, memory_limit: int | None, timeout: float, queue: _Queue
) -> None:
    try:
        _lane(exe, tmp, memory_limit, timeout, queue)
    except BaseException as e:  # re-raised by run_audits in the calling thread
        queue.failed(e)


def _lane(exe: str, tmp: Path, memory_limit: int | None, timeout: float, queue: _Queue) -> None:
    """One worker at a time takes jobs from ``queue`` until none is left; a crash replaces it."""
    tmp.mkdir(exist_ok=True)
    index = queue.take()
    while True:
        worker = _Worker(exe, tmp, memory_limit)
        try:
            queue.started(worker.start())
            while index is not None:
                result = _run_one(worker, tmp, queue.jobs[index], timeout, queue.reading)
                queue.finish(index, result)
                index = queue.take()
                if result.status == "crash":
                    break
            else:
                return
        finally:
            worker.stop()


def worker_capabilities(python: str | os.PathLike[str] | None) -> Capabilities:
    """The capabilities (``_static``) of ``python``'s jax, asked of one worker.

    Raises:
        NotFoundError: ``python`` does not exist or is not executable.
        AuditError: the worker does not start or answers nonsense.
    """
    from jaxport.audit._static import Capabilities

    exe = _interpreter(python)
    with tempfile.TemporaryDirectory(prefix="jaxport-audit-") as tmp:
        worker = _Worker(exe, Path(tmp), DEFAULT_MEMORY_LIMIT)
        try:
            worker.start()
            reply = worker.ask({"capabilities": True}, _START_TIMEOUT)
            try:
                return Capabilities.from_json(reply)
            except (KeyError, TypeError, ValueError):
                raise AuditError(f"the audit worker of {exe} sent no capabilities") from None
        finally:
            worker.stop()


def _run_one(
    worker: _Worker, tmp: Path, job: AuditJob, timeout: float, reading: threading.Lock
) -> AuditResult:
    """Writes the job's files (one reader at a time), runs it, removes them."""
    try:
        with reading:
            request = _write_job(tmp, job)
    except JaxportError as e:  # a blob that is missing or corrupt: that variant's finding
        return AuditResult("error", f"{type(e).__name__}: {e}", {}, 0.0)
    try:
        return worker.run(request, timeout)
    finally:
        for key in ("archive", "examples"):
            if request[key] is not None:
                Path(request[key]).unlink(missing_ok=True)


def _read(blob: Blob) -> bytes:
    return blob() if callable(blob) else blob


def _interpreter(python: str | os.PathLike[str] | None) -> str:
    if python is None:
        return sys.executable
    path = os.fspath(python)
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        raise NotFoundError(f"no Python interpreter at {path}")
    return path


def _write_job(tmp: Path, job: AuditJob) -> dict[str, Any]:
    archive = tmp / "job.jaxport"
    archive.write_bytes(_read(job.archive))
    examples = None
    if job.examples is not None:
        examples = tmp / "job.npz"
        examples.write_bytes(_read(job.examples))
    return {
        "archive": str(archive),
        "examples": None if examples is None else str(examples),
        "platform": job.platform,
    }


class _Worker:
    """One worker process and the parent's end of its pipes."""

    def __init__(self, exe: str, tmp: Path, memory_limit: int | None):
        self._exe = exe
        self._stderr = (tmp / f"stderr-{time.monotonic_ns()}").open("w+b")
        env = worker_environment()  # an allow-list: no registry URL, token or credentials
        limit = [] if memory_limit is None else ["--memory-limit", str(int(memory_limit))]
        self._proc = _children.spawn(  # dies with this process
            [exe, "-P", "-m", "jaxport.audit._worker", *limit],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=tmp,
            env=env,
        )
        self._selector = selectors.DefaultSelector()
        assert self._proc.stdout is not None
        self._selector.register(self._proc.stdout, selectors.EVENT_READ)

    def start(self) -> Environment:
        line = self._readline(_START_TIMEOUT)
        try:
            hello = json.loads(line or b"")
            return Environment(str(hello["jax_version"]), str(hello["jaxlib_version"]))
        except (ValueError, KeyError, TypeError):
            raise AuditError(
                f"the audit worker did not start with {self._exe}: {self._tail()} (is jaxport "
                "installed in that environment?)"
            ) from None

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request answered by one JSON object (AuditError if none comes)."""
        reply = self._exchange(request, timeout)
        if not isinstance(reply, dict):
            raise AuditError(f"the audit worker did not answer: {reply.reason}")
        return reply

    def run(self, request: dict[str, Any], timeout: float) -> AuditResult:
        """One audit job: its result, or a ``crash`` where the worker died or ran out of time."""
        reply = self._exchange(request, timeout)
        if isinstance(reply, AuditResult):
            return reply
        return AuditResult(reply["status"], reply["reason"], reply["checks"], reply["seconds"])

    def _exchange(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | AuditResult:
        """Sends ``request``; the worker's JSON reply, or a ``crash`` result without one."""
        start = time.perf_counter()
        try:
            assert self._proc.stdin is not None
            deadline = {**request, "deadline": timeout}  # the worker's own alarm, past it
            self._proc.stdin.write(json.dumps(deadline).encode() + b"\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self._readline(timeout)
        seconds = time.perf_counter() - start
        if line is None:
            self._proc.kill()
            self._proc.wait()
            return AuditResult("crash", f"killed after the {timeout:g} s time limit", {}, seconds)
        if not line:
            return AuditResult("crash", self._death(), {}, seconds)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _readline(self, timeout: float) -> bytes | None:
        """A line from the worker, b"" at its end, None after ``timeout`` seconds."""
        if not self._selector.select(timeout):
            return None
        assert self._proc.stdout is not None
        return self._proc.stdout.readline()

    def _death(self) -> str:
        code = self._proc.wait()
        if code < 0:
            name = signal.Signals(-code).name
            return f"the worker died with {name} ({self._tail()})"
        return f"the worker exited with status {code} ({self._tail()})"

    def _tail(self) -> str:
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().decode(errors="replace").splitlines() if ln]
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        self._selector.close()
        self._stderr.close()


def main(argv: Sequence[str] | None = None) -> None:
    """The worker: ``[--memory-limit BYTES]``; audits each request read from stdin, one JSON
    line out per line in."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--memory-limit"]:
        import resource

        limit = int(args[1])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    stdin, stdout = sys.stdin, sys.stdout
    from jaxport._standins import standins_allowed
    from jaxport.export._internal import jax_versions

    with standins_allowed():  # the user's custom pytree nodes are not imported here
        _serve(stdin, stdout, jax_versions())


def _serve(stdin: IO[str], stdout: IO[str], versions: tuple[str, str]) -> None:
    jax_version, jaxlib_version = versions
    _send(stdout, {"jax_version": jax_version, "jaxlib_version": jaxlib_version})
    for line in stdin:
        request = json.loads(line)
        _children.own_deadline(request.get("deadline"))  # should the parent stop watching
        _send(stdout, _answer(request))
        _children.own_deadline(None)


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request: the capabilities, or an audit's or a check's result."""
    from jaxport.audit._checks import audit_archive, check_archive

    if request.get("capabilities"):
        from jaxport.audit._static import capabilities

        return capabilities().to_json()
    examples, data = request["examples"], Path(request["archive"]).read_bytes()
    if request["platform"] is None:
        result = check_archive(data)
    else:
        result = audit_archive(
            data,
            platform=request["platform"],
            examples=None if examples is None else Path(examples).read_bytes(),
        )
    return dataclasses.asdict(result)


def _send(stdout: IO[str], message: dict[str, Any]) -> None:
    stdout.write(json.dumps(message) + "\n")
    stdout.flush()


if __name__ == "__main__":
    main()
