"""sha256 beside other work: hashlib releases the GIL, so a thread hashes while another
compresses, decompresses or writes.

``Sha256Beside`` hashes pieces in the order they are fed, in one thread of its own, while its
caller produces the next ones; ``sha256_beside`` hashes one buffer in a thread and gives a
future. Below ``THREADED_BYTES`` both hash in the caller's thread: a thread costs more than it
saves. ``Sha256Jobs`` hashes many buffers (a model's tensors) in threads that can be started
before the caller writes them and joined by more threads once it has.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["THREADED_BYTES", "THREADS", "Sha256Beside", "Sha256Jobs", "sha256_beside"]

#: Threads that hash (or compress) tensors: one per core (CPU-bound work; hashlib and
#: zstandard release the GIL).
THREADS = max(2, min(32, os.cpu_count() or 1))

#: Work on fewer bytes than this stays in the caller's thread (4 MiB: about 3 ms of sha256).
THREADED_BYTES = 4 << 20


class Sha256Beside:
    """The sha256 of the pieces given to ``update``, in order, hashed in a thread.

    A piece must not change until ``digest()`` returns (it is hashed later). Use as a context
    manager, or call ``close()``: the thread ends with it.
    """

    def __init__(self, threaded: bool):
        self._hash = hashlib.sha256()
        self._pool = ThreadPoolExecutor(1, "jaxport-sha256") if threaded else None
        self._last: Future[None] | None = None

    def __enter__(self) -> Sha256Beside:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, piece: bytes | memoryview, owner: object = None) -> None:
        """Queues ``piece`` to be hashed after the pieces before it; ``owner`` (the object that
        owns a view's memory, where the view does not keep it alive) is kept until then."""
        if self._pool is None:
            self._hash.update(piece)
        else:
            self._last = self._pool.submit(_update, self._hash, piece, owner)

    def digest(self) -> bytes:
        """The digest of every piece given; waits for the thread to hash them."""
        if self._last is not None:
            self._last.result()
        return self._hash.digest()

    def close(self) -> None:
        """Ends the thread; pieces not hashed yet are dropped (call ``digest()`` first)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


def _update(digest: Any, piece: bytes | memoryview, owner: object) -> None:
    digest.update(piece)


def sha256_beside(data: bytes | memoryview, pool: ThreadPoolExecutor | None) -> Callable[[], bytes]:
    """A function that gives ``sha256(data)``: hashed in ``pool`` now (when given, and
    ``data`` is large), else when the function is called."""
    if pool is None or len(data) < THREADED_BYTES:
        return lambda: hashlib.sha256(data).digest()
    future: Future[Any] = pool.submit(lambda: hashlib.sha256(data).digest())
    return lambda: bytes(future.result())


class Sha256Jobs:
    """The sha256 of each of ``datas`` (but those ``known``), hashed by threads that take the
    largest buffer left first.

    ``start(n)`` sets ``n`` threads to work now (a writer leaves a core to its writes);
    ``digests(n)`` brings them to ``n`` and waits for every digest; ``cancel()`` stops them
    after the buffers they hold (a writer that failed). Buffers must not change meanwhile.
    """

    def __init__(self, datas: Sequence[bytes | memoryview], known: Sequence[bytes | None]):
        self._datas = datas
        self._digests = list(known) + [None] * (len(datas) - len(known))
        todo = [i for i, d in enumerate(self._digests) if d is None]
        self._todo = sorted(todo, key=lambda i: len(datas[i]))  # popped from the end
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None

    def start(self, threads: int) -> None:
        """Brings the number of hashing threads to ``threads`` (no more than there are jobs)."""
        with self._lock:
            wanted = min(threads, len(self._todo)) - sum(t.is_alive() for t in self._threads)
        for _ in range(wanted):
            thread = threading.Thread(target=self._work, name="jaxport-sha256", daemon=True)
            thread.start()
            self._threads.append(thread)

    def digests(self, threads: int) -> list[bytes]:
        """Every digest, in the order of ``datas``, hashed by up to ``threads`` threads, the
        caller's among them.

        Raises:
            BaseException: what a thread raised (a ``MemoryError``, say).
            RuntimeError: the jobs were cancelled.
        """
        self.start(threads - 1)
        self._work()
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise self._error
        digests = [d for d in self._digests if d is not None]
        if len(digests) != len(self._digests):
            raise RuntimeError("the digests were cancelled")
        return digests

    def cancel(self) -> None:
        """No buffer is started after this (threads finish the one they hold)."""
        with self._lock:
            self._todo.clear()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._todo or self._error is not None:
                    return
                i = self._todo.pop()
            try:
                self._digests[i] = hashlib.sha256(self._datas[i]).digest()
            except BaseException as e:  # handed to the caller of digests()
                with self._lock:
                    self._error = e
                return
