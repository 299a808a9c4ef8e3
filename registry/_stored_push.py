"""A push of a model archive whose parts the blob store holds already, checked by the store's
own checksums: the registry server's commit of parts a client uploaded straight to S3
(``_uploads.StoredModel``, ``_store_urls``), without reading the tensors.

What is checked, and how:
- the layout: the parts are the skeleton, then each tensor's section once, in order, as the
  skeleton's header declares them (``_uploads.plan_parts``, before this runs);
- the skeleton: read, verified against its digest and validated in full, as any model's
  (every method and VJP level, every module in the sandbox);
- each tensor part: its size (the header's section length) and the sha256 the store computed
  when it was written, by a HEAD (``StoreUrls.checksum``), equal to the section's digest in the
  header; a zstd section is read and decompressed too (the bytes must be what the header says);
- the whole archive's sha256 is the client's word (no one can compute it without reading every
  byte): a push is refused where a stored variant has that digest with other parts, and every
  whole read (a pull) checks it.

Raises (``stored_item``):
    IntegrityError: a part the store holds no checksum for, or another one, or of another size;
        the digest names another archive (``check_claimed``).
    CorruptArchiveError, UnsupportedVersionError, UnsupportedFeatureError,
        UnsafeArchiveError: see ``jaxport.loads_model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from jaxport import IntegrityError
from jaxport.registry._model_parts import header_info, open_model, parts_of
from jaxport.registry._models import VariantRow
from jaxport.registry._uploads import StoredModel, vouched

if TYPE_CHECKING:
    from jaxport.export import ArchiveInfo, Model
    from jaxport.export._internal import VerdictCache

__all__ = ["check_claimed", "stored_model"]


def stored_model(
    source: StoredModel, verdicts: VerdictCache | None, allow: Sequence[str]
) -> tuple[ArchiveInfo, Model, Any]:
    """The header and the validated model of ``source`` (see the module's doc), and the
    modules a newer jax wrote (``newer_modules_passed``: stored, not run here); its tensor
    parts are left unread where the store vouches for them."""
    from jaxport.export._internal import newer_modules_passed

    archive, blobs = source.archive, source.blobs
    info = header_info(blobs, archive.parts[0].digest, archive.size)
    _check_tensor_parts(source)
    where = f"sha256:{archive.digest[:12]}"
    with newer_modules_passed() as newer:
        model = open_model(
            blobs, archive.parts, archive.size, where=where, allow_custom_calls=allow,
            verdicts=verdicts,
        )  # fmt: skip
        for name, exported in model.exported.items():
            current = exported
            for _ in range(model.vjp_orders[name]):
                current = current.vjp()
    for tensor in info.tensors:
        if info.sections[tensor.section].compression != "none":
            model.tensor(tensor.path)  # read, checked against its digest, decompressed
    return info, model, newer


def _check_tensor_parts(source: StoredModel) -> None:
    """Each tensor part's size and store-recorded sha256 (one HEAD each, ``vouched``).

    Raises:
        IntegrityError: the first part that is missing or does not match (``.expected``).
    """
    part = vouched(source.blobs, source.archive.parts[1:])
    if part is not None:
        raise IntegrityError(
            f"the part {part.digest} is not stored with that sha256 and size "
            f"({part.size:,} bytes) as the store computed them: upload it again",
            expected=part.digest,
        )


def check_claimed(conn: Connection, digest: str, parts: Sequence[Any]) -> None:
    """Refuses an archive digest that a stored variant has with other parts.

    Raises:
        IntegrityError: the digest names another archive.
    """
    query = select(VariantRow.id).where(VariantRow.digest == digest).limit(1)
    variant_id = conn.execute(query).scalar_one_or_none()
    if variant_id is not None and list(parts_of(conn, variant_id)) != list(parts):
        raise IntegrityError(
            f"sha256:{digest} is the digest of another archive in this registry: these parts "
            "do not make it",
            expected=digest,
        )
