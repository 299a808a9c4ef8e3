"""A version of a registry written as OCI content to an ``OciTarget`` (``schema/OCI.md`` is
normative; ``registry/_oci_mapping.py`` reads it back).

``push_version`` writes, per variant, a config (the archive header's description,
``_oci_variant``) and its parts as layers, sending only the blobs the target lacks, and a
variant manifest; then the version's image index, tagged ``v<N>``; the aliases that point at
the version as tags; each signature and the audit findings of each variant as referrers. What
is there already (the index under its tag, a manifest, a blob) is not sent again, so a second
push sends nothing. The parts are read from the blob store of a direct registry (their list
from its database), or split from the archive pulled through a registry server.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxport import ConflictError, IntegrityError, NotFoundError, OciError
from jaxport.export._internal import Part
from jaxport.registry._oci_media import (
    ANNOTATION,
    EMPTY_CONFIG,
    FINDINGS,
    HEADER,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MAX_MANIFEST_BYTES,
    SIGNATURE,
    VARIANT,
    VERSION,
    Descriptor,
    canonical,
    oci_digest,
    parse_index,
    sha256_of,
)
from jaxport.registry._oci_referrers import (
    Attached,
    findings_layer,
    findings_manifest,
    signature_manifest,
)
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_target import OciTarget
from jaxport.registry._oci_variant import config_of, variant_manifest

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import Ref, VariantInfo

__all__ = ["alias_tag", "push_version", "registry_attached", "version_tag"]

#: Bytes per chunk read from a blob store.
CHUNK = 1 << 20


def version_tag(version: int) -> str:
    """The tag of version ``N``: ``vN``."""
    return f"v{version}"


def alias_tag(alias: str) -> str | None:
    """The tag of an alias: the alias itself, unless it is no OCI tag (over 128 characters)
    or is one of the mapping's own tags (``vN``, ``sha256-...``); then None."""
    if len(alias) > 128 or re.fullmatch(r"v[0-9]+|sha256-.*", alias):
        return None
    return alias


def push_version(
    registry: Registry, reference: str, target: OciTarget, report: CopyReport, *,
    tags: Sequence[str] = (),
) -> str:  # fmt: skip
    """Writes the version ``reference`` names (with its aliases, signatures and findings) to
    ``target`` (see the module docstring); returns its index's digest. ``tags``: more tags for
    the index (``jaxport oci push``'s ``:TAG``).

    Raises:
        NotFoundError: no such version.
        ConflictError: the target's tag ``vN`` holds other archives (nothing is written).
        OciError: a model whose manifest would be over ``MAX_MANIFEST_BYTES``; the target's
            refusals.
        IntegrityError: a part of the registry is missing or corrupt.
    """
    ref = registry.get(reference)
    found = _existing(target, ref)
    if found is None:
        subjects = {}
        entries = []
        for variant in ref.variants:
            manifest = _push_variant(registry, ref, variant, target, report)
            subjects[variant.digest] = manifest
            entries.append(_index_entry(manifest, variant))
        body = canonical(_index(ref, entries))
        index = Descriptor.of(IMAGE_INDEX, body)
        _ensure(target, version_tag(ref.version), IMAGE_INDEX, body, report)
        report.versions.append(f"{ref.name}:{ref.version}")
    else:
        index, subjects = found
        report.skipped.append(f"{ref.name}:{ref.version}")
    _push_referrers(registry, ref, subjects, target, report)
    aliased = [a for a, v in registry.aliases(ref.name).items() if v == ref.version]
    for tag in [*tags, *aliased]:
        _push_tag(target, ref, tag, index, report)
    return index.digest


def _existing(target: OciTarget, ref: Ref) -> tuple[Descriptor, dict[str, Descriptor]] | None:
    """The target's index of ``ref`` (under its tag) when it lists the same archives, and
    its variant manifests by archive digest (hex); None where the tag is absent.

    Raises:
        ConflictError: the tag holds other archives (another registry's version ``N``).
        OciError: the tag holds something malformed.
    """
    tag = version_tag(ref.version)
    try:
        _, body = target.fetch_manifest(tag)
    except NotFoundError:
        return None
    entries = parse_index(body, f"tag {tag}")["manifests"]
    archives = [e.annotations.get(ANNOTATION["archive"]) for e in entries]
    if archives != [oci_digest(d) for d in ref.digests]:
        raise ConflictError(
            f"tag {tag} holds other archives than {ref.name}:{ref.version} (another registry's "
            f"version {ref.version}?): not overwritten; remove the tag or push elsewhere"
        )
    subjects = {
        e.annotations[ANNOTATION["archive"]][7:]: Descriptor(e.media_type, e.digest, e.size)
        for e in entries
    }
    return Descriptor.of(IMAGE_INDEX, body), subjects


def _push_variant(
    registry: Registry, ref: Ref, variant: VariantInfo, target: OciTarget, report: CopyReport
) -> Descriptor:
    with _variant_parts(registry, variant) as (parts, read):
        config = canonical(config_of(variant, parts))
        body = variant_manifest(ref, variant, parts, Descriptor.of(HEADER, config))
        if len(body) > MAX_MANIFEST_BYTES:
            raise OciError(
                f"{ref.name}:{ref.version}'s variant {variant.short_digest} has {len(parts)} "
                f"parts: its manifest would be {len(body)} bytes, over {MAX_MANIFEST_BYTES}"
            )
        _send(target, sha256_of(config), len(config), lambda: [config], report)
        for part in parts:
            _send(target, oci_digest(part.digest), part.size, functools.partial(read, part), report)
    digest = _ensure(target, None, IMAGE_MANIFEST, body, report)
    return Descriptor(IMAGE_MANIFEST, digest, len(body))


def _send(
    target: OciTarget, digest: str, size: int, chunks: Callable[[], Iterable[bytes]],
    report: CopyReport,
) -> None:  # fmt: skip
    if target.has_blob(digest):
        report.blobs_present += 1
        return
    target.push_blob(digest, size, chunks())
    report.blobs += 1
    report.bytes += size


def _ensure(
    target: OciTarget, tag: str | None, media_type: str, body: bytes, report: CopyReport
) -> str:
    """Pushes the manifest ``body`` (tagged ``tag``) unless the target holds it (under that
    tag); returns its digest."""
    digest = sha256_of(body)
    try:
        if tag is not None:
            if sha256_of(target.fetch_manifest(tag)[1]) == digest:
                return digest
        else:
            target.fetch_manifest(digest)
            return digest
    except NotFoundError:
        pass
    target.push_manifest(tag, media_type, body)
    report.manifests += 1
    return digest


def _push_tag(
    target: OciTarget, ref: Ref, alias: str, index: Descriptor, report: CopyReport
) -> None:
    tag = alias_tag(alias)
    if tag is None:
        report.notes.append(f"{ref.name}@{alias}: no OCI tag (a reserved or too long name)")
        return
    _, body = target.fetch_manifest(index.digest)
    before = report.manifests
    _ensure(target, tag, IMAGE_INDEX, body, report)
    if report.manifests > before:
        report.aliases.append(f"{ref.name}@{alias}")


def _index_entry(manifest: Descriptor, variant: VariantInfo) -> Descriptor:
    notes = {
        ANNOTATION["platforms"]: ",".join(variant.platforms),
        ANNOTATION["nr_devices"]: str(variant.nr_devices),
        ANNOTATION["sharded"]: "true" if variant.sharded else "false",
        ANNOTATION["archive"]: oci_digest(variant.digest),
        ANNOTATION["kind"]: variant.kind,
    }
    return Descriptor(manifest.media_type, manifest.digest, manifest.size, notes, VARIANT)


def _index(ref: Ref, entries: list[Descriptor]) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": IMAGE_INDEX,
        "artifactType": VERSION,
        "manifests": [e.to_json() for e in entries],
        "annotations": {
            ANNOTATION["name"]: ref.name,
            ANNOTATION["version"]: str(ref.version),
            ANNOTATION["kind"]: ref.kind,
            ANNOTATION["metadata"]: canonical(ref.metadata).decode(),
            ANNOTATION["created"]: _rfc3339(ref.created_at),
        },
    }


def _push_referrers(
    registry: Registry, ref: Ref, subjects: dict[str, Descriptor], target: OciTarget,
    report: CopyReport,
) -> None:  # fmt: skip
    for sig in registry.signatures(f"{ref.name}:{ref.version}"):
        bundle = registry.read_blob(sig.bundle_digest)
        layer = Descriptor.of(SIGNATURE, bundle)
        body = signature_manifest(
            subjects[sig.digest], layer, sig.signer, sig.kind, _rfc3339(sig.created_at)
        )
        if _referrer_missing(target, body):
            _send(target, layer.digest, layer.size, functools.partial(list, [bundle]), report)
            _send_empty(target, report)
            _ensure(target, None, IMAGE_MANIFEST, body, report)
            report.signatures += 1
    rows = _finding_rows(registry, ref)
    for digest, subject in subjects.items():
        mine = [r for r in rows if r["digest"] == digest]
        if not mine:
            continue
        data = findings_layer(mine)
        layer = Descriptor.of(FINDINGS, data)
        body = findings_manifest(subject, layer)
        if _referrer_missing(target, body):
            _send(target, layer.digest, layer.size, functools.partial(list, [data]), report)
            _send_empty(target, report)
            _ensure(target, None, IMAGE_MANIFEST, body, report)
            report.findings += len(mine)


def _referrer_missing(target: OciTarget, body: bytes) -> bool:
    try:
        target.fetch_manifest(sha256_of(body))
    except NotFoundError:
        return True
    return False


def _send_empty(target: OciTarget, report: CopyReport) -> None:
    _send(target, sha256_of(EMPTY_CONFIG), len(EMPTY_CONFIG), lambda: [EMPTY_CONFIG], report)


def registry_attached(registry: Registry, ref: Ref) -> Attached:
    """The signatures and findings a registry holds for the variants of ``ref``."""
    sigs = [
        (s.digest, registry.read_blob(s.bundle_digest), s.signer, s.kind)
        for s in registry.signatures(f"{ref.name}:{ref.version}")
    ]
    return Attached(sigs, _finding_rows(registry, ref))


def _finding_rows(registry: Registry, ref: Ref) -> list[dict[str, Any]]:
    digests = set(ref.digests)
    rows = []
    for f in registry.audit_results(name=ref.name):
        if f.digest in digests and f.version == ref.version:
            rows.append({
                "digest": f.digest, "level": f.level, "jax_version": f.jax_version,
                "jaxlib_version": f.jaxlib_version, "platform": f.platform,
                "devices": f.devices, "examples_digest": None, "status": f.status,
                "reason": f.reason, "details_json": json.dumps(f.checks, sort_keys=True),
                "seconds": f.seconds, "created_at": f.created_at,
            })  # fmt: skip
    return rows


@contextlib.contextmanager
def _variant_parts(
    registry: Registry, variant: VariantInfo
) -> Iterator[tuple[tuple[Part, ...], Callable[[Part], Iterable[bytes]]]]:
    """The variant's parts as the registry stores them, and a reader of each part's bytes:
    from a direct registry the database's parts and the blob store's blobs; through a server
    the archive pulled to a temporary file and split as the registry splits it."""
    blobs = registry.blobs
    if blobs is not None:
        yield _stored_parts(registry, variant), lambda p: _blob_chunks(blobs, p.digest)
        return
    from jaxport._files import DEFAULT_MAX_READ
    from jaxport.registry._remote_push import archive_parts

    with tempfile.TemporaryDirectory(prefix="jaxport-oci-") as tmp:
        path = Path(tmp) / "archive.jaxport"
        registry.pull_file(f"sha256:{variant.digest}", path, platform=None)
        local = archive_parts(path, vjp_order=0, max_size=DEFAULT_MAX_READ)
        yield local.parts.parts, lambda p: [bytes(local.chunks.view(p.offset, p.end))]


def _stored_parts(registry: Registry, variant: VariantInfo) -> tuple[Part, ...]:
    if variant.kind != "model":
        return (Part(0, variant.digest, 0, variant.size_bytes),)
    from jaxport.registry._model_parts import parts_of

    engine = registry._backend.engine  # type: ignore[attr-defined]  # a SqlBackend's
    with engine.connect() as conn:
        return tuple(parts_of(conn, variant.variant_id))


def _blob_chunks(blobs: Any, digest: str) -> Iterator[bytes]:
    from jaxport.registry._blobs import FsspecBlobStore, LocalBlobStore

    if not isinstance(blobs, LocalBlobStore | FsspecBlobStore):
        yield blobs.get(digest)
        return
    try:
        f = blobs.open(digest)
    except FileNotFoundError:
        raise IntegrityError(
            f"blob {digest} is missing from {blobs.url}", expected=digest
        ) from None
    with f:
        while chunk := f.read(CHUNK):
            yield chunk


def _rfc3339(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
