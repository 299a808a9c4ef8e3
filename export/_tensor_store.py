"""The parameter tensors of a model: arrays in memory, or bytes read and verified lazily."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
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
    ):
        self._infos = tuple(infos) if infos is not None else None
        self._arrays = list(arrays)
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
        """Each tensor's info (the digests of in-memory arrays are computed now)."""
        if self._infos is None:
            infos = []
            for i, (p, a) in enumerate(zip(paths, self._arrays, strict=True)):
                assert a is not None
                data = _tensors.tensor_bytes(a)
                digest = _sha256(data)
                infos.append(TensorInfo(p, tuple(a.shape), a.dtype.name, len(data), digest, i + 1))
            self._infos = tuple(infos)
        return self._infos

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
        threads (hashlib releases the GIL). Raises: as ``array``, for the first bad tensor."""
        unread = [i for i, a in enumerate(self._arrays) if a is None]
        if len(unread) > 1:
            with ThreadPoolExecutor(_VERIFY_THREADS) as pool:
                list(pool.map(self.array, unread))
        return [self.array(i) for i in range(len(self._arrays))]


def _sha256(data: memoryview) -> str:
    return hashlib.sha256(data).hexdigest()
