"""The parameter tensors of a model: arrays in memory, or bytes read and verified lazily."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from jaxport.export import _tensors
from jaxport.export._tensors import TensorInfo

__all__ = ["TensorStore"]

#: Threads that verify tensors when all of them are read (``TensorStore.all_arrays``).
_VERIFY_THREADS = min(8, os.cpu_count() or 1)


class TensorStore:
    """The parameter tensors of a model: arrays in memory, or bytes read (and verified) lazily.

    ``read`` gives a tensor's stored bytes (a memory-mapped view where it can); each tensor is
    read and checked against its sha256 once, the first time it is asked for.
    """

    def __init__(
        self,
        infos: Sequence[TensorInfo] | None,
        arrays: Sequence[np.ndarray[Any, Any] | None],
        read: Callable[[TensorInfo], bytes | memoryview] | None = None,
        path: str | None = None,
        *,
        digests_hold: bool = True,
    ):
        self._infos = tuple(infos) if infos is not None else None
        self._arrays = list(arrays)
        # Per tensor, the digest its bytes were (or will be) checked against, where those bytes
        # cannot change afterwards (``digests_hold``: not a caller's writable buffer).
        self._known: list[str | None] = (
            [i.sha256 for i in self._infos]
            if self._infos is not None and digests_hold
            else [None] * len(arrays)
        )
        self._read = read
        self._path = path
        self._lock = threading.Lock()  # guards bytes_read
        self._tensor_locks = [threading.Lock() for _ in self._arrays]  # each read once
        self.bytes_read = 0

    @classmethod
    def of_arrays(cls, arrays: Sequence[np.ndarray[Any, Any]]) -> TensorStore:
        """A store of host arrays (``_tensors.host_array``), digests computed when asked."""
        return cls(None, arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def infos(self, paths: Sequence[str]) -> tuple[TensorInfo, ...]:
        """Each tensor's info (the digests of in-memory arrays are computed now, but for those
        ``known_digests`` holds)."""
        if self._infos is None:
            arrays = [a for a in self._arrays if a is not None]
            datas = [_tensors.tensor_bytes(a) for a in arrays]
            digests = _tensors.tensor_digests(datas, self._known)
            self._infos = tuple(
                TensorInfo(p, tuple(a.shape), a.dtype.name, len(d), digest.hex(), i + 1)
                for i, (p, a, d, digest) in enumerate(
                    zip(paths, arrays, datas, digests, strict=True)
                )
            )
        return self._infos

    def known_digests(self) -> list[str | None]:
        """Each tensor's sha256 (hex) where it was read from an archive (and checked against
        that digest before use), else None: an array in memory may have been changed since
        its digest was computed."""
        return list(self._known)

    def replaced(self, arrays: Sequence[np.ndarray[Any, Any]]) -> TensorStore:
        """A store of ``arrays`` (same count) that keeps the known digest of each array that
        is the very (read-only, verified) array this store read: ``update_params`` with most
        leaves unchanged hashes only the new ones when saved."""
        store = TensorStore.of_arrays(arrays)
        store._known = [
            known if known is not None and new is old else None
            for new, old, known in zip(arrays, self._arrays, self._known, strict=True)
        ]
        return store

    def spec(self, index: int) -> tuple[tuple[int, ...], str]:
        """``(shape, dtype name)`` of tensor ``index``, without reading it."""
        array = self._arrays[index]
        if array is not None:
            return tuple(array.shape), array.dtype.name
        assert self._infos is not None
        return self._infos[index].shape, self._infos[index].dtype

    def array(self, index: int) -> np.ndarray[Any, Any]:
        """Tensor ``index`` as a read-only host array, verified against its digest.

        Raises:
            IntegrityError: its bytes do not match its digest.
            CorruptArchiveError, OSError: its bytes cannot be read.
        """
        array = self._arrays[index]
        if array is not None:
            return array
        with self._tensor_locks[index]:  # other tensors are read meanwhile, in other threads
            array = self._arrays[index]
            if array is None:
                assert self._infos is not None and self._read is not None
                info = self._infos[index]
                data = self._read(info)
                with self._lock:
                    self.bytes_read += len(data)
                array = _tensors.array_from_bytes(info, data, path=self._path)
                self._arrays[index] = array
        return array

    def all_arrays(self) -> list[np.ndarray[Any, Any]]:
        """Every tensor, as ``array`` gives it; those not read yet are read and verified in
        threads (``read_ahead``). Raises: as ``array``, for the first bad tensor."""
        self.read_ahead(range(len(self._arrays)))
        return [self.array(i) for i in range(len(self._arrays))]

    def read_ahead(self, indices: Iterable[int]) -> None:
        """Reads and verifies the tensors ``indices`` not read yet, in threads (hashlib
        releases the GIL; a remote read waits on the network): a method's tensors cost the
        slowest read, not their sum. Raises: as ``array``, for the first bad tensor."""
        unread = [i for i in dict.fromkeys(indices) if self._arrays[i] is None]
        infos = self._infos
        if infos is not None:  # largest first: the threads finish together
            unread.sort(key=lambda i: -infos[i].nbytes)
        if len(unread) > 1:
            with ThreadPoolExecutor(_VERIFY_THREADS) as pool:
                list(pool.map(self.array, unread))
