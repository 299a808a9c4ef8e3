"""Reading what a variant stores: its ``Exported``, its ``Model``, its archive's bytes or file.

A function variant is one blob (the archive); a model variant is its parts (``_model_parts``),
each verified against its digest as it is read. Every read that finds a blob missing checks
whether the variant was deleted meanwhile, and says so (``NotFoundError``) rather than report
a corrupt store.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from jaxport import IntegrityError, NotFoundError
from jaxport.export._internal import Part
from jaxport.registry import _db
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._model_parts import (
    MODEL,
    archive_chunks,
    header_info,
    joined_archive,
    open_model,
    parts_of,
)
from jaxport.registry._queries import Queries
from jaxport.registry._streams import BlobStream, open_stream
from jaxport.registry._types import VariantInfo
from jaxport.registry._verdicts import pull_verdicts

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.export import Model
    from jaxport.export._internal import VerdictCache

__all__ = ["Pulls"]


class Pulls:
    """Reads variants chosen by ``Registry.resolve``; see the ``Registry`` methods."""

    def __init__(self, engine: Engine, blobs: BlobStore, queries: Queries) -> None:
        self._engine = engine
        self._blobs = blobs
        self._queries = queries
        self._verdict_cache: VerdictCache | None = None

    @property
    def _verdicts(self) -> VerdictCache:
        """The registry's sandbox verdicts, then the local cache (made on first use: it imports
        jaxport.export, hence jax)."""
        if self._verdict_cache is None:
            self._verdict_cache = pull_verdicts(self._engine)
        return self._verdict_cache

    def function(
        self, reference: str, chosen: VariantInfo, allow_custom_calls: Sequence[str]
    ) -> Exported:
        """The ``Exported`` of a function variant (``Registry.pull``)."""
        from jaxport.export import loads

        data = self.archive_bytes(reference, chosen)
        exported: Exported = loads(
            data, verdicts=self._verdicts, **_custom_calls(allow_custom_calls)
        )
        return exported

    def model(self, chosen: VariantInfo, allow_custom_calls: Sequence[str]) -> Model:
        """The ``Model`` of a model variant (``Registry.pull_model``): its skeleton read."""
        return open_model(
            self._blobs,
            self._parts(chosen.variant_id),
            chosen.size_bytes,
            where=f"{chosen.name}:{chosen.version}",
            allow_custom_calls=allow_custom_calls,
            verdicts=self._verdicts,
        )

    def archive_bytes(self, reference: str, chosen: VariantInfo) -> bytes:
        """The archive of ``chosen``, verified (a model's put together from its parts)."""
        try:
            if chosen.kind != MODEL:
                return read_verified(self._blobs, chosen.digest)
            parts = self._parts(chosen.variant_id)
            if parts:
                return joined_archive(self._blobs, parts, chosen.size_bytes)
        except IntegrityError as e:
            if e.found is not None or self._queries.has_variant(chosen.variant_id):
                raise
        raise NotFoundError(f"{reference} was deleted while it was being pulled")

    def write_file(self, reference: str, chosen: VariantInfo, path: str | os.PathLike[str]) -> None:
        """``Registry.pull_file``: a model archive written one part at a time."""
        from jaxport._io import atomic_write

        if chosen.kind != MODEL:
            atomic_write(path, [self.archive_bytes(reference, chosen)])
            return
        parts = self._parts(chosen.variant_id)
        if not parts:
            raise NotFoundError(f"{reference} was deleted while it was being pulled")
        atomic_write(path, archive_chunks(self._blobs, parts, chosen.size_bytes))

    def blob(self, digest: str) -> bytes:
        """``Registry.read_blob``: a blob, or the archive of a model variant with that digest."""
        try:
            return read_verified(self._blobs, digest)
        except IntegrityError as e:
            if e.found is not None:
                raise
            variant = self._queries.model_variant(digest)
            if variant is None:
                raise
        return self.archive_bytes(variant.short_digest, variant)

    def stream(self, digest: str) -> BlobStream:
        """``Registry.blob_stream``: a blob, or the archive of a model variant, as chunks."""
        if self._blobs.exists(digest):
            return open_stream(self._blobs, digest, None, None)
        variant = self._queries.model_variant(digest)
        if variant is None:
            raise NotFoundError(f"no blob or archive {digest}")
        parts = self._parts(variant.variant_id)
        if not parts:
            raise NotFoundError(f"no blob or archive {digest} (deleted meanwhile)")
        return open_stream(self._blobs, digest, parts, variant.size_bytes)

    def described(self, variant: VariantInfo) -> VariantInfo:
        """A model variant with its methods and tensors (a function variant as it is)."""
        if variant.kind != MODEL:
            return variant
        parts = self._parts(variant.variant_id)
        if not parts:
            return variant  # deleted meanwhile
        info = header_info(self._blobs, parts[0].digest, variant.size_bytes)
        return dataclasses.replace(variant, methods=info.methods, tensors=info.tensors)

    def _parts(self, variant_id: int) -> builtins.list[Part]:
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return parts_of(conn, variant_id)


def _custom_calls(allowed: Sequence[str]) -> dict[str, Any]:
    """``loads`` keyword for an allowlist, passed only when given (older readers lack it)."""
    return {"allow_custom_calls": tuple(allowed)} if allowed else {}
