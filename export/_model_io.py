"""Reading model archives: ``load_model`` (a memory-mapped file), ``loads_model`` (bytes).

Only the header and the modules' section are read when a model is opened; a tensor is read,
and checked against its sha256, the first time it is used (``Model.tensor``, a method call,
``Model.params``). From a file the tensors are views of a read-only memory map: nothing is
copied, and a tensor costs no I/O until it is touched.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable
from typing import Any

from jaxport import CorruptArchiveError
from jaxport._files import open_regular
from jaxport.export import _archive, _container, _model_archive, _vetting
from jaxport.export._model import Model
from jaxport.export._tensor_store import TensorStore
from jaxport.export._tensors import TensorInfo
from jaxport.export._verdicts import VerdictCache
from jaxport.export._window_check import check_header_window
from jaxport.schema import fb

__all__ = ["load_model", "loads_model", "open_model"]


def loads_model(
    data: bytes | bytearray | memoryview,
    *,
    allow_custom_calls: Iterable[str] = (),
    allow_unsupported_calling_convention: bool = False,
    max_compression_ratio: float = _container.MAX_COMPRESSION_RATIO,
    path: str | None = None,
    trusted: bool = False,
    verdicts: VerdictCache | None = None,
    outside_window: str = "warn",
) -> Model:
    """The model in a model archive's bytes; tensors are views of ``data``, read lazily.

    Checks everything ``jaxport.loads`` checks of each method, and that the tensors match the
    parameter tree and every method's first argument. Each tensor's sha256 is checked when it
    is first used. Every method's modules go through the module sandbox as in ``loads``
    (``trusted``, ``verdicts``, ``outside_window``: as there).

    Raises:
        CorruptArchiveError: not a well-formed model archive (a function archive included:
            read those with ``jaxport.loads``); non-zero padding between sections.
        IntegrityError: a digest of the header or of the modules' section does not match (a
            tensor's, when it is used).
        UnsupportedVersionError, UnsupportedFeatureError, UnsafeArchiveError,
            UnsafeModuleError, OutsideJaxWindowError, ValueError: as ``loads``.
    """
    policy = _vetting.module_policy(allow_custom_calls, trusted=trusted, verdicts=verdicts)
    view = memoryview(data).cast("B")
    head = _archive.read_header(view, len(view), path=path)
    payload = view[head.payload_start :]
    _container.check_padding(payload, head.sections, payload_start=head.payload_start, path=path)
    reader = _container.SectionReader(
        payload,
        head.sections,
        payload_start=head.payload_start,
        path=path,
        max_compression_ratio=max_compression_ratio,
    )

    def read(info: TensorInfo) -> bytes | memoryview:
        s = head.sections[info.section]
        if s.compression == fb.Compression.none:
            return payload[s.offset : s.offset + s.length]
        return reader.read(info.section, 0, s.uncompressed_length)

    return open_model(
        head,
        reader,
        read,
        policy=policy,
        allow_unsupported_calling_convention=allow_unsupported_calling_convention,
        path=path,
        digests_hold=view.readonly,  # a bytearray may change after a tensor is verified
        outside_window=outside_window,
    )


def open_model(
    head: _archive.ArchiveHeader,
    modules: _container.SectionReader,
    read_tensor: Callable[[TensorInfo], bytes | memoryview],
    *,
    policy: _vetting.ModulePolicy,
    allow_unsupported_calling_convention: bool = False,
    path: str | None = None,
    digests_hold: bool = True,
    outside_window: str = "warn",
) -> Model:
    """A ``Model`` from a checked header, its modules' reader and a reader of tensor bytes
    (``read_tensor``: the bytes of a tensor, checked by the caller of nothing; the model checks
    each against its digest). ``digests_hold``: the bytes cannot change once read (immutable
    bytes, a read-only map), so a save may take a verified tensor's digest without hashing it
    again. ``policy``: ``_vetting.module_policy(...)``; ``outside_window``: as ``loads``, applied
    before any module is read. Raises: see ``loads_model``."""
    check_header_window(head, outside_window, path=path)
    header = _model_archive.read_model_header(
        head,
        modules,
        policy=policy,
        allow_unsupported_calling_convention=allow_unsupported_calling_convention,
        path=path,
    )
    store = TensorStore(
        header.tensors, [None] * len(header.tensors), read_tensor, path, digests_hold=digests_hold
    )
    return Model._of_store(
        header.params_tree,
        store,
        header.exported,
        header.vjp_orders,
        header.metadata,
        [t.path for t in header.tensors],  # each checked against its leaf's path
    )


def load_model(
    path: str | os.PathLike[str],
    *,
    allow_custom_calls: Iterable[str] = (),
    allow_unsupported_calling_convention: bool = False,
    max_compression_ratio: float = _container.MAX_COMPRESSION_RATIO,
    trusted: bool = False,
    verdicts: VerdictCache | None = None,
    outside_window: str = "warn",
) -> Model:
    """The model archive at ``path``, memory-mapped: tensors are read when first used.

    The file must not change while the model is in use (the map would show the change; each
    tensor's digest is checked when it is read, so a change before then is caught).

    Raises:
        OSError: the file cannot be opened or mapped.
        CorruptArchiveError: also a path that is not a regular file (a FIFO, a device).
        IntegrityError, UnsupportedVersionError,
            UnsupportedFeatureError, UnsafeArchiveError, OutsideJaxWindowError: see
            ``loads_model``.
    """
    with open_regular(path, CorruptArchiveError) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise CorruptArchiveError("truncated: 0 bytes", path=str(path))
        mapped: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return loads_model(
        mapped,
        allow_custom_calls=allow_custom_calls,
        allow_unsupported_calling_convention=allow_unsupported_calling_convention,
        max_compression_ratio=max_compression_ratio,
        path=str(path),
        trusted=trusted,
        verdicts=verdicts,
        outside_window=outside_window,
    )
