"""What a connection to ``jaxport serve`` may hold, and for how long (issue 24's F5).

- **Headers**: a connection sends a request's whole head within ``HEADER_TIMEOUT`` seconds
  of connecting, or of the answer before (``DeadlineH11Protocol``, uvicorn's h11 protocol with
  that deadline; uvicorn has none: a client sending a byte now and then held a connection
  forever), else it is closed without an answer. An idle kept-alive connection is closed
  after ``KEEP_ALIVE`` seconds (uvicorn's ``timeout_keep_alive``). A body the route answered
  without reading it all (a 401 before an unauthenticated write's body, a page that reads
  none) ends within ``BODY_TIMEOUT`` seconds of the answer, else the connection is closed:
  uvicorn restarts its keep-alive timer on every byte, so a byte now and then after the
  answer held the connection forever.
- **Bodies**: a body other than a part upload arrives whole within ``BODY_TIMEOUT`` seconds
  of its head (``server/_guard.py``: the route sees the client as gone, 400); an upload may
  pause at most ``server/_bridge.py``'s ``BODY_IDLE`` seconds between chunks.
- **Connections**: at most ``--max-connections`` (``MAX_CONNECTIONS``) per server process
  (uvicorn's ``limit_concurrency``: past it, 503), and the process's soft limit of open files
  is raised to its hard limit when the server starts (``raise_open_file_limit``), so the cap,
  not the file limit, is what a crowd of clients meets.
- **Logs**: what a flood of bad connections makes asyncio, uvicorn and the server log is
  rate-limited (``RateLimit``): ``LOG_BURST`` lines per logger, then one per
  ``LOG_INTERVAL`` seconds, with the count of those dropped; never a traceback's text twice.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "BODY_TIMEOUT",
    "HEADER_TIMEOUT",
    "KEEP_ALIVE",
    "LOG_BURST",
    "LOG_INTERVAL",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "DeadlineH11Protocol",
    "RateLimit",
    "connection_cap",
    "install_log_limits",
    "raise_open_file_limit",
]

#: Seconds a request's head (request line and headers) may take to arrive.
HEADER_TIMEOUT = 10.0
#: Seconds a body other than a part upload may take to arrive, from its head.
BODY_TIMEOUT = 30.0
#: Seconds an idle kept-alive connection stays open.
KEEP_ALIVE = 5
#: Bytes of a request head h11 buffers before it refuses it (400): uvicorn's default.
MAX_HEAD = 16 << 10
#: The default ``--max-connections``: open connections (and tasks) of one server process.
MAX_CONNECTIONS = 1024
#: Lines a logger writes before ``RateLimit`` holds it to one per ``LOG_INTERVAL`` seconds.
LOG_BURST = 20
LOG_INTERVAL = 10.0
#: File descriptors kept for what is not a connection (database, blobs, threads, workers).
_OTHER_FILES = 256
_LIMITED_LOGGERS = ("asyncio", "uvicorn", "uvicorn.error", "jaxport.server")


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not whole within
    ``HEADER_TIMEOUT`` seconds (of connecting, or of the previous answer), or whose body the
    answer left unread does not end within ``BODY_TIMEOUT`` seconds of the answer."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._answering():  # a whole head arrived
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():  # the next head, or the rest of this body
            self._arm(HEADER_TIMEOUT if self.conn.their_state is h11.IDLE else BODY_TIMEOUT)

    def _answering(self) -> bool:
        """Whether a request's head arrived and its answer is not sent yet."""
        return self.conn.our_state in (h11.SEND_RESPONSE, h11.SEND_BODY)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, seconds: float = HEADER_TIMEOUT) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(seconds, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if not self._answering() and not self.transport.is_closing():
            self.transport.close()


def raise_open_file_limit() -> int:
    """Raises this process's soft limit of open files to its hard limit (on a system that
    has one); returns the soft limit now (0 where there is none to read)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return int(soft if soft != resource.RLIM_INFINITY else target)
    for candidate in (target, 1 << 20, 10240):  # macOS refuses more than OPEN_MAX
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(candidate, target), hard))
            return min(candidate, target)
        except (ValueError, OSError):
            continue
    return int(soft)


def connection_cap(requested: int, open_files: int) -> int:
    """``requested`` connections, fewer where the file limit leaves less room."""
    if open_files <= 0:
        return requested
    return max(16, min(requested, open_files - _OTHER_FILES))


class RateLimit(logging.Filter):
    """Lets ``burst`` records of a logger through, then one per ``interval`` seconds; the one
    let through after a pause says how many were dropped, and records' tracebacks are cut
    to their exception's type and message (a flood repeats the same one)."""

    def __init__(self, burst: int = LOG_BURST, interval: float = LOG_INTERVAL) -> None:
        super().__init__()
        self.burst, self.interval = burst, interval
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._dropped = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) / self.interval)
            self._last = now
            if self._tokens < 1:
                self._dropped += 1
                return False
            self._tokens -= 1
            dropped, self._dropped = self._dropped, 0
        if record.exc_info and record.exc_info[1] is not None:
            error: Any = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {error}"
            record.args, record.exc_info, record.exc_text = None, None, None
        if dropped:
            record.msg = f"{record.getMessage()} ({dropped} similar lines dropped)"
            record.args = None
        return True


def install_log_limits() -> None:
    """A ``RateLimit`` on each logger a flood of connections writes to (once per process)."""
    for name in _LIMITED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())
