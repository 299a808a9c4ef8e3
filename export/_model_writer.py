"""Writing a model archive file: each tensor hashed a chunk at a time, each chunk written
right after it was hashed, at its own offset, the header last.

``Model.save`` must record each tensor's sha256 in the header, which comes first in the file;
the header is written last, over the hole left for it. Threads (one per core but one) take the
largest tensor left and hash it a ``CHUNK`` at a time (hashlib releases the GIL), handing each
chunk to the caller's thread, which writes it with ``os.pwrite`` (which also releases it) and,
while every hashing thread is busy, takes a tensor itself. One thread writes, so none waits for
another on the file's lock, and one large tensor costs the slower of hashing it and writing it,
not their sum. Runs of small tensors (each under ``CHUNK``) go as one write. Meanwhile another
thread asks the disk to write what is written so far (``fdatasync`` every ``FLUSH_BYTES``), so
the final ``fsync`` finds little left; on a file system in memory (tmpfs) that costs nothing.

Memory: no tensor is copied but small ones (each under ``CHUNK``, joined into writes of up to
``GROUP_BYTES``). Durability and atomicity as ``jaxport._io.atomic_write``: a temporary file
beside the target, fsynced, renamed over it; removed on any error.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from jaxport._io import create_temporary
from jaxport.export._hashing import THREADS
from jaxport.export._model_archive import ModelLayout

__all__ = ["CHUNK", "FLUSH_BYTES", "GROUP_BYTES", "can_write_in_place", "write_model_file"]

#: Bytes hashed then written at a time (they stay in the core's cache in between).
CHUNK = 1 << 20
#: Small tensors are joined into writes of at most this many bytes.
GROUP_BYTES = 4 << 20
#: The disk is asked to write out what is written each time this many more bytes are.
FLUSH_BYTES = 64 << 20


def can_write_in_place() -> bool:
    """Whether this platform has ``os.pwrite`` (not Windows): else write ``model_chunks``."""
    return hasattr(os, "pwrite")


def write_model_file(path: str | os.PathLike[str], layout: ModelLayout) -> None:
    """Writes the archive ``layout`` describes to ``path`` atomically and durably: a temporary
    file beside it, hashed by ``THREADS - 1`` threads and the caller's, written by the caller's,
    its header written once every digest is known, fsynced and renamed over ``path``.

    Raises:
        OSError: the directory is missing or not writable, the disk is full (no temporary
            file is left).
        BaseException: what a hashing or writing thread raised (``MemoryError``, say).
    """
    target = Path(path)
    fd, tmp = create_temporary(target)
    try:
        try:
            os.ftruncate(fd, layout.length)  # the header's and the paddings' bytes: a hole
            for offset, chunk in layout.modules:
                _pwrite(fd, chunk, offset)
            digests = _Writer(fd, layout).run()
            _pwrite(fd, layout.head(digests), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclasses.dataclass(frozen=True)
class _Job:
    """Tensors to hash (``indices`` not known) and write at ``offset``: one large tensor, or
    a run of small ones joined with their zero padding (``data`` then a copy)."""

    offset: int
    data: bytes | bytearray | memoryview
    indices: Sequence[int]
    starts: Sequence[int]  # where each tensor starts in ``data``


def _jobs(layout: ModelLayout) -> list[_Job]:
    """The write jobs, the largest last (popped first); runs of small tensors joined."""
    jobs: list[_Job] = []
    run: list[int] = []

    def close_run() -> None:
        if run:
            first, last = layout.tensors[run[0]], layout.tensors[run[-1]]
            data = bytearray(last[0] + len(last[1]) - first[0])
            starts = [layout.tensors[i][0] - first[0] for i in run]
            for i, start in zip(run, starts, strict=True):
                view = layout.tensors[i][1]
                data[start : start + len(view)] = view
            jobs.append(_Job(first[0], data, list(run), starts))
            run.clear()

    for i, (offset, data) in enumerate(layout.tensors):
        if len(data) >= CHUNK:
            close_run()
            jobs.append(_Job(offset, data, [i], [0]))
            continue
        if run and offset + len(data) - layout.tensors[run[0]][0] > GROUP_BYTES:
            close_run()
        run.append(i)
    close_run()
    jobs.sort(key=lambda j: len(j.data))
    return jobs


class _Writer:
    """The caller's thread writes; ``THREADS - 1`` threads hash (see the module's docstring).

    A hashing thread takes the largest job left, hashes it a chunk at a time and hands each
    chunk to the writer; the writer writes what it is handed, in the order handed, and when
    every hashing thread has a job and more jobs are left than hashing threads, takes one
    itself (hashing a chunk, writing what was handed meanwhile, then the chunk). Only the
    writer writes: threads never wait for each other on the file (its lock), whatever else
    runs on the machine.
    """

    def __init__(self, fd: int, layout: ModelLayout):
        self._fd, self._layout = fd, layout
        self._digests: list[bytes | None] = list(layout.known)
        self._jobs = _jobs(layout)
        self._handed: collections.deque[tuple[int, bytes | bytearray | memoryview]] = (
            collections.deque()
        )
        self._cond = threading.Condition()
        self._hashers = min(THREADS - 1, len(self._jobs))  # hashing threads alive
        self._hashing = 0  # hashing threads with a job
        self._error: BaseException | None = None
        self._written = 0
        self._flush_at = FLUSH_BYTES  # the flusher is woken when this many bytes are written
        self._done = False

    def run(self) -> list[bytes]:
        """Every tensor's sha256, in tensor order, once all are written (not yet synced).
        Raises: what a thread raised, after every thread stopped."""
        threads = [
            threading.Thread(target=self._hash_jobs, name="jaxport-model-hash", daemon=True)
            for _ in range(self._hashers)
        ]
        if self._layout.length >= 2 * FLUSH_BYTES:
            threads.append(
                threading.Thread(target=self._flush, name="jaxport-model-flush", daemon=True)
            )
        for thread in threads:
            thread.start()
        try:
            self._write_all()
        except BaseException as e:  # the hashing threads stop after their chunk
            self._fail(e)
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()
            for thread in threads:
                thread.join()
        if self._error is not None:
            raise self._error
        digests = [d for d in self._digests if d is not None]
        assert len(digests) == len(self._digests)
        return digests

    def _fail(self, error: BaseException) -> None:
        with self._cond:
            self._error = self._error or error
            self._cond.notify_all()

    def _hash_jobs(self) -> None:
        """A hashing thread: jobs until none is left, each chunk handed to the writer."""
        try:
            while True:
                with self._cond:
                    if self._error is not None or not self._jobs:
                        return
                    job = self._jobs.pop()
                    self._hashing += 1
                try:
                    self._hash(job, hand=True)
                finally:
                    with self._cond:
                        self._hashing -= 1
                        self._cond.notify_all()
        except BaseException as e:  # handed to run()'s caller
            self._fail(e)
        finally:
            with self._cond:
                self._hashers -= 1
                self._cond.notify_all()

    def _write_all(self) -> None:
        """The writer: what is handed, and a job of its own while every hashing thread has
        one and more jobs are left than there are hashing threads (the writer, which also
        writes everything, would finish the last ones alone while a core idles); returns once
        every job is hashed and every chunk written, or a thread failed."""
        while True:
            job = None
            with self._cond:
                while self._error is None:
                    if self._handed:
                        offset, data = self._handed.popleft()
                        break
                    if len(self._jobs) > self._hashers and self._hashing >= self._hashers:
                        job = self._jobs.pop()  # the last ones are left to the hashing threads
                        break
                    if not self._jobs and not self._hashing:
                        return
                    self._cond.wait()
                else:
                    return
            if job is None:
                self._write(data, offset)
            else:
                self._hash(job, hand=False)

    def _hash(self, job: _Job, *, hand: bool) -> None:
        """Hashes the tensors of ``job`` not known yet, a chunk at a time, each chunk then
        handed to the writer (``hand``) or written now, after what was handed meanwhile."""
        todo = [
            (i, s) for i, s in zip(job.indices, job.starts, strict=True) if not self._digests[i]
        ]
        if len(job.indices) > 1:  # small tensors: hash each, one write
            for i, start in todo:
                n = len(self._layout.tensors[i][1])
                view = memoryview(job.data)[start : start + n]
                self._digests[i] = hashlib.sha256(view).digest()
            self._emit(job.data, job.offset, hand)
            return
        data = memoryview(job.data)
        digest = hashlib.sha256() if todo else None
        for start, stop in _chunks(job.offset, len(data)):
            chunk = data[start:stop]
            if digest is not None:
                digest.update(chunk)
            self._emit(chunk, job.offset + start, hand)
            if self._error is not None:
                return
        if digest is not None:
            self._digests[job.indices[0]] = digest.digest()

    def _emit(self, data: bytes | bytearray | memoryview, offset: int, hand: bool) -> None:
        if hand:
            with self._cond:
                self._handed.append((offset, data))
                self._cond.notify_all()
            return
        while True:  # the writer: first what the hashing threads handed
            with self._cond:
                if not self._handed:
                    break
                handed_offset, handed = self._handed.popleft()
            self._write(handed, handed_offset)
        self._write(data, offset)

    def _write(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        _pwrite(self._fd, data, offset)
        with self._cond:
            self._written += len(data)
            if self._written >= self._flush_at:
                self._flush_at = self._written + FLUSH_BYTES
                self._cond.notify_all()

    def _flush(self) -> None:
        """Asks the disk to write what is written, every ``FLUSH_BYTES``, until the writer
        is done (an error here is left to the final fsync to report)."""
        flushed = 0
        sync = getattr(os, "fdatasync", os.fsync)
        while True:
            with self._cond:
                while not self._done and self._written - flushed < FLUSH_BYTES:
                    self._cond.wait()
                if self._done:
                    return
                flushed = self._written
            try:
                sync(self._fd)
            except OSError:
                return


def _chunks(offset: int, length: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk of ``length`` bytes written at file offset ``offset``,
    cut where the file offset is a multiple of ``CHUNK``: no page of the file is written by
    two chunks (a page the disk is writing out makes a second write to it wait)."""
    first = -offset % CHUNK or CHUNK
    bounds = [0, *range(first, length, CHUNK), length]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _pwrite(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """All of ``data`` at ``offset`` (``os.pwrite`` may write less)."""
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n
