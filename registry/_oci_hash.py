"""``BackgroundSha256``: a sha256 computed on another thread while the caller goes on reading
and writing (hashlib releases the GIL for updates over 2 KiB), so a blob read from a registry
is hashed on a second core instead of after each receive. Used by ``registry/_oci_client.py``
(each layer) and ``registry/_oci_mapping.py`` (the assembled archive).
"""

from __future__ import annotations

import collections
import hashlib
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["BackgroundSha256"]

#: Bytes gathered before they go to the hashing thread (fewer, larger hand-overs).
BATCH = 2 << 20
#: Batches handed over and not yet hashed, at most: the memory held is bounded by
#: ``BATCH * PENDING``.
PENDING = 4


class BackgroundSha256:
    """``update`` hands the bytes to a hashing thread, in order; ``hexdigest`` waits for it.
    ``close`` (or ``hexdigest``) ends the thread; use it in a ``finally``."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxport-sha256")
        self._batch: list[bytes] = []
        self._held = 0
        self._pending: collections.deque[Future[None]] = collections.deque()

    def update(self, data: bytes) -> None:
        """Adds ``data`` (not to be changed afterwards) to what is hashed."""
        self._batch.append(data)
        self._held += len(data)
        if self._held >= BATCH:
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch, self._held = self._batch, [], 0
        self._pending.append(self._pool.submit(self._digest_all, batch))
        while len(self._pending) > PENDING:
            self._pending.popleft().result()

    def _digest_all(self, batch: list[bytes]) -> None:
        for data in batch:
            self._hash.update(data)

    def hexdigest(self) -> str:
        """The sha256 of everything given, once the thread has hashed it."""
        self._hand_over()
        while self._pending:
            self._pending.popleft().result()
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        """Ends the thread (what it had not hashed is dropped)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
