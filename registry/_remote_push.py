"""A push's archives, made on the client and split into parts (``registry/_uploads.py``).

A ``jax.export.Exported`` is written with ``jaxport.dumps``; a ``jaxport.Model`` as its
archive's chunks (tensors not copied); bytes and files as they are (a file at most
``max_size`` bytes, a regular file). A model archive is split as the registry stores it
(``jaxport.export._internal.split_archive``: skeleton, then one part per tensor section), so the
part
digests are the blob digests the server holds already for tensors it has; any other archive
(a function archive, or jax-native bytes the server converts) is one part. The server
validates everything again: this split only decides what is sent. Golden examples are made
here too (``examples_blob``: outputs computed by a source that runs here) and sent as one more
part; the server reads them back without running anything. A path or bytes are split without
importing jax (the archive's header is FlatBuffers); an ``Exported`` or ``Model`` needs it.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jaxport import CorruptArchiveError, InvalidNameError, NotFoundError
from jaxport._files import open_regular
from jaxport.export._internal import (
    ArchiveChunks,
    ArchiveLayout,
    chunks_info,
    chunks_layout,
    split_archive,
)
from jaxport.registry._golden import check_examples, golden_blob, runs_here
from jaxport.registry._uploads import ArchiveParts

if TYPE_CHECKING:
    from jaxport.export import Model

__all__ = ["LocalArchive", "archive_parts", "default_name", "examples_blob"]


@dataclasses.dataclass(frozen=True)
class LocalArchive:
    """An archive ready to send: its bytes as ``chunks``, its ``parts``, its header's
    ``layout`` (None for bytes that are not a jaxport archive; read without jax)."""

    chunks: ArchiveChunks
    parts: ArchiveParts
    layout: ArchiveLayout | None

    def info(self) -> Any:
        """The whole header (``jaxport.inspect``: imports jax), of a jaxport archive."""
        return chunks_info(self.chunks)


def archive_parts(source: Any, *, vjp_order: int, max_size: int) -> LocalArchive:
    """``source`` (an Exported, a Model, bytes or a path) as an archive and its parts.

    Raises:
        NotFoundError: a path that does not exist.
        InvalidNameError: a path that is not a regular file or is over ``max_size``; a
            source of another type.
    """
    if isinstance(source, str | os.PathLike):
        chunks = ArchiveChunks([_mapped(source, max_size)])
    elif isinstance(source, bytes | bytearray | memoryview):
        chunks = ArchiveChunks([bytes(source)])
    elif isinstance(source, _model_type()):
        chunks = ArchiveChunks(source.dump_chunks(rehash=True))
    elif hasattr(source, "mlir_module_serialized") and hasattr(source, "in_avals"):
        from jaxport.export import dumps

        chunks = ArchiveChunks([dumps(source, vjp_order=vjp_order)])
    else:
        raise InvalidNameError(
            f"push takes an Exported, a Model, archive bytes or a path, got {type(source).__name__}"
        )
    try:
        layout: ArchiveLayout | None = chunks_layout(chunks)
    except CorruptArchiveError:
        layout = None  # jax-native bytes (the server converts them), or garbage (it refuses)
    digest = chunks.sha256()
    parts = split_archive(chunks, layout, digest=digest)
    return LocalArchive(chunks, ArchiveParts(digest, chunks.size, tuple(parts)), layout)


def _model_type() -> type[Model]:
    """``jaxport.Model``, imported only for a source that is neither a path nor bytes (it
    imports jax: a file's push through a server loads none)."""
    from jaxport.export import Model

    return Model


def default_name(archive: LocalArchive) -> str | None:
    """The name a push takes by default: a function archive's ``fun_name`` (None otherwise:
    the server then takes it from the converted archive, or asks for one)."""
    layout = archive.layout
    if layout is None or layout.kind == "model":
        return None
    return layout.fun_name or None


def _mapped(path: str | os.PathLike[str], max_size: int) -> memoryview:
    try:
        with open_regular(path, InvalidNameError, max_size=max_size) as f:
            if os.fstat(f.fileno()).st_size == 0:
                return memoryview(b"")
            return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    except FileNotFoundError:
        raise NotFoundError(f"no such file: {path}") from None


def examples_blob(
    sources: Sequence[Any], archives: Sequence[LocalArchive], examples: Any, tolerance: Any = None
) -> tuple[str, bytes, str]:
    """``(sha256, npz bytes, kind)`` of a push's golden examples, made here: outputs not given
    are computed by a source that runs in this process (as a direct push computes them).

    Raises:
        InvalidNameError: the examples do not fit the archives (``check_examples``), or the
            first archive is not a jaxport archive (jax-native bytes: convert them first).
        UnsupportedFeatureError: an output is missing and no source runs here.
    """
    if archives[0].layout is None:
        raise InvalidNameError(
            "golden examples need jaxport archives: convert jax-native bytes first "
            "(jaxport.dumps), or push them without examples"
        )
    info = archives[0].info()
    check_examples(info, examples)
    kind = "model" if info.kind == "model" else "function"
    digest, data = golden_blob(kind, examples, lambda: _runner(sources, archives), tolerance)
    return digest, data, kind


def _runner(sources: Sequence[Any], archives: Sequence[LocalArchive]) -> Any:
    """The first source the caller passed as an object (an ``Exported`` or ``Model``) that
    runs here (None: none does). Archive bytes and files are never called to compute outputs:
    their modules are not the caller's code, and a call in this process has no time limit
    (issue 24, F13); the caller loads and calls them, or gives the outputs."""
    from jaxport.export import Model

    for source, archive in zip(sources, archives, strict=True):
        if archive.layout is None or not runs_here(archive.info()):
            continue
        if isinstance(source, Model) or hasattr(source, "mlir_module_serialized"):
            return source
    return None
