"""A version of a jaxport registry as OCI content, and back (``schema/OCI.md`` is normative).

``push_version`` writes one version to an ``OciTarget`` (a repository of an OCI registry, or
one name of an image layout): per variant a config (the archive header's description,
``_oci_variant``) and its parts as layers, sending only the blobs the target lacks; a variant
manifest each; the version's image index, tagged ``v<N>``; the aliases that point at the
version as tags; each signature and the audit findings of each variant as referrers. What is
there already (the index under its tag, a manifest, a blob) is not sent again, so a second
push sends nothing.

``read_version`` reads a version back (every manifest and config checked and verified;
nothing stored), ``assemble`` puts one variant's archive together from its layers (each
verified, then the whole archive's sha256), ``pull_version`` pushes what it read into a
``Registry`` (any backend), with its signatures and findings where the backend can store
them. ``write_variant`` writes one variant's archive to a file, without a registry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxport import (
    ConflictError,
    IntegrityError,
    JaxportError,
    NotFoundError,
    OciError,
    UnsupportedFeatureError,
)
from jaxport._io import atomic_write
from jaxport.export._internal import Part
from jaxport.registry._oci_media import (
    ANNOTATION,
    EMPTY_CONFIG,
    EMPTY_JSON,
    FINDINGS,
    HEADER,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MAX_MANIFEST_BYTES,
    MAX_REFERRER_BYTES,
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
    findings_layer,
    findings_manifest,
    findings_rows,
    signature_manifest,
)
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_target import OciTarget
from jaxport.registry._oci_variant import (
    OciVariant,
    config_of,
    read_variant,
    variant_manifest,
)

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import PushResult, Ref, VariantInfo

__all__ = [
    "Attached",
    "OciVersion",
    "adopt_attached",
    "alias_tag",
    "assemble",
    "pull_version",
    "push_version",
    "read_attached",
    "read_version",
    "registry_attached",
    "version_tag",
    "write_variant",
]

#: Bytes per chunk read from a blob store.
CHUNK = 1 << 20
_ZEROS = bytes(4096)


def version_tag(version: int) -> str:
    """The tag of version ``N``: ``vN``."""
    return f"v{version}"


def alias_tag(alias: str) -> str | None:
    """The tag of an alias: the alias itself, unless it is no OCI tag (over 128 characters)
    or is one of the mapping's own tags (``vN``, ``sha256-...``); then None."""
    import re

    if len(alias) > 128 or re.fullmatch(r"v[0-9]+|sha256-.*", alias):
        return None
    return alias


@dataclasses.dataclass(frozen=True)
class OciVersion:
    """A version as read from OCI content: its index's descriptor, the name and version its
    annotations record, the version's metadata, and its variants."""

    index: Descriptor
    name: str
    version: int | None
    metadata: dict[str, str]
    variants: tuple[OciVariant, ...]


# -- registry -> OCI -------------------------------------------------------------------------


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


# -- OCI -> registry -------------------------------------------------------------------------


def read_version(target: OciTarget, reference: str) -> OciVersion:
    """The version at ``reference`` (a tag or an index digest), every manifest and config
    fetched, verified and checked (see ``_oci_variant.read_variant``); no layer is read.

    Raises:
        NotFoundError: no such tag or manifest.
        OciError: not a jaxport version's index, or a malformed manifest or config.
        IntegrityError: a manifest or config that does not have its digest.
    """
    from jaxport.registry._names import check_name

    media_type, body = target.fetch_manifest(reference)
    if media_type != IMAGE_INDEX:
        raise OciError(f"{reference} is a {media_type}, not a jaxport version's image index")
    doc = parse_index(body, reference)
    if doc["artifactType"] != VERSION:
        raise OciError(f"{reference} is not a jaxport version (artifactType {VERSION})")
    notes = doc["annotations"]
    try:
        name = check_name(notes.get(ANNOTATION["name"]))
    except JaxportError:
        raise OciError(f"{reference}: its index names no valid jaxport name") from None
    version_text = notes.get(ANNOTATION["version"], "")
    metadata = _metadata(notes.get(ANNOTATION["metadata"], "{}"), reference)
    if not doc["manifests"]:
        raise OciError(f"{reference}: a version's index lists at least one variant")
    variants = tuple(read_variant(target, d) for d in doc["manifests"])
    kinds = {v.kind for v in variants}
    if len(kinds) != 1:
        raise OciError(f"{reference}: a version's variants are all functions or all models")
    index = Descriptor(IMAGE_INDEX, sha256_of(body), len(body))
    version = int(version_text) if version_text.isdigit() else None
    return OciVersion(index, name, version, metadata, variants)


def _metadata(text: str, where: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise OciError(f"{where}: its metadata annotation is not a JSON object of strings")
    return value


def assemble(
    target: OciTarget, variant: OciVariant, path: str | os.PathLike[str], report: CopyReport,
    registry: Registry | None = None,
) -> Path:  # fmt: skip
    """Writes the variant's archive to ``path`` (atomically): each part fetched (from
    ``registry`` where it holds the part already, else from ``target``), each verified, zero
    padding between, then the whole archive's sha256 checked.

    Raises:
        NotFoundError: a layer is absent.
        IntegrityError: a layer or the whole archive does not have its digest.
    """
    have: set[str] = set()
    if registry is not None and len(variant.parts) > 1:
        digests = [p.digest for p in variant.parts]
        with contextlib.suppress(UnsupportedFeatureError):
            have = set(digests) - set(registry.missing_blobs(digests))
    whole = hashlib.sha256()

    def chunks() -> Iterator[bytes]:
        position = 0
        for part in variant.parts:
            while position < part.offset:
                n = min(len(_ZEROS), part.offset - position)
                whole.update(_ZEROS[:n])
                yield _ZEROS[:n]
                position += n
            for chunk in _part(target, part, have, registry, report):
                whole.update(chunk)
                yield chunk
            position = part.end
        if position != variant.size:
            raise IntegrityError(f"the layers make {position} bytes, not {variant.size}")

    out = Path(path)
    atomic_write(out, chunks())
    if whole.hexdigest() != variant.digest:
        out.unlink(missing_ok=True)
        raise IntegrityError(
            f"the layers make an archive with sha256:{whole.hexdigest()[:12]}, not "
            f"sha256:{variant.digest[:12]}", expected=variant.digest, found=whole.hexdigest(),
        )  # fmt: skip
    return out


def _part(
    target: OciTarget, part: Part, have: set[str], registry: Registry | None, report: CopyReport
) -> Iterator[bytes]:
    if registry is not None and part.digest in have:
        data = registry.read_blob(part.digest)  # verified by the registry
        report.blobs_present += 1
        yield data
        return
    n = 0  # the target checks the layer's digest at its last chunk (OciTarget.fetch_blob)
    for chunk in target.fetch_blob(oci_digest(part.digest), part.size):
        n += len(chunk)
        if n > part.size:
            raise IntegrityError(f"layer {part.digest[:12]} is more than {part.size} bytes")
        yield chunk
    if n != part.size:
        raise IntegrityError(f"layer sha256:{part.digest[:12]} is {n} bytes, not {part.size}")
    report.blobs += 1
    report.bytes += n


@dataclasses.dataclass(frozen=True)
class Attached:
    """A variant's referrers, read and checked: signatures ``(digest, bundle, signer,
    kind)`` and findings rows."""

    signatures: list[tuple[str, bytes, str, str]]
    findings: list[dict[str, Any]]


def read_attached(target: OciTarget, version: OciVersion) -> Attached:
    """The signatures and findings attached to each variant of ``version``, every manifest
    and layer verified and checked.

    Raises:
        OciError: a malformed referrer; IntegrityError: one that does not have its digest.
    """
    from jaxport.registry._oci_variant import fetch_manifest_checked, fetch_small

    sigs: list[tuple[str, bytes, str, str]] = []
    rows: list[dict[str, Any]] = []
    for v in version.variants:
        for found in target.referrers(v.manifest.digest):
            doc = fetch_manifest_checked(target, found.get("digest", ""))
            if doc["subject"] is None or doc["subject"].digest != v.manifest.digest:
                continue  # a referrers list that names another subject's: ignored
            if doc["artifactType"] not in (SIGNATURE, FINDINGS) or len(doc["layers"]) != 1:
                continue  # referrers of other tools
            if doc["config"].media_type != EMPTY_JSON:
                raise OciError(f"referrer {found.get('digest')}: its config is not empty")
            data = fetch_small(target, doc["layers"][0], MAX_REFERRER_BYTES)
            if doc["artifactType"] == SIGNATURE:
                notes = doc["annotations"]
                sigs.append((v.digest, data, notes.get(ANNOTATION["signer"], ""),
                             notes.get(ANNOTATION["signature_kind"], "")))  # fmt: skip
            else:
                rows += findings_rows(data, v.digest)
    return Attached(sigs, rows)


def pull_version(
    target: OciTarget, reference: str, registry: Registry, report: CopyReport, *,
    name: str | None = None, version: OciVersion | None = None,
) -> PushResult:  # fmt: skip
    """Pushes the version at ``reference`` into ``registry`` as ``name`` (default: the name
    its index records) with its metadata, then stores its signatures and findings where the
    registry can (a direct one; through a server a note says they were not stored). Nothing
    is pushed before every manifest, layer and referrer is read and verified.

    Raises:
        (see ``read_version``, ``assemble`` and ``Registry.push``)
    """
    found = version if version is not None else read_version(target, reference)
    attached = read_attached(target, found)
    with tempfile.TemporaryDirectory(prefix="jaxport-oci-") as tmp:
        paths = [
            assemble(target, v, Path(tmp) / f"{i}.jaxport", report, registry)
            for i, v in enumerate(found.variants)
        ]
        result = registry.push(paths, name or found.name, metadata=found.metadata)
    where = f"{result.name}:{result.version}"
    (report.versions if result.created else report.skipped).append(where)
    adopt_attached(registry, attached, where, report)
    return result


def adopt_attached(registry: Registry, attached: Attached, where: str, report: CopyReport) -> None:
    backend = registry._backend
    try:
        for digest, bundle, signer, kind in attached.signatures:
            before = {s.bundle_digest for s in registry.signatures(where)}
            stored = backend.adopt_signature(digest, bundle, signer, kind)
            report.signatures += stored.bundle_digest not in before
        report.findings += backend.adopt_findings(attached.findings) if attached.findings else 0
    except UnsupportedFeatureError as e:
        report.notes.append(f"{where}: signatures and findings not stored: {e}")


def write_variant(
    target: OciTarget, reference: str, path: str | os.PathLike[str], *,
    platform: str | None = None, nr_devices: int | None = None,
) -> OciVariant:  # fmt: skip
    """Writes the archive of the variant of the version at ``reference`` that runs on
    ``platform`` with ``nr_devices`` (None: any; as ``Registry.resolve`` chooses within a
    version) to ``path``, verified; returns the variant.

    Raises:
        NotFoundError: no variant runs there (the message lists those that exist).
        (and see ``read_version`` and ``assemble``)
    """
    from jaxport.registry._rules import device_reason, platform_reason

    found = read_version(target, reference)
    fits = [
        v for v in found.variants
        if platform_reason(v.platforms, platform) is None
        and device_reason(v.nr_devices, v.sharded, nr_devices) is None
    ]  # fmt: skip
    if nr_devices is not None:
        fits.sort(key=lambda v: v.nr_devices != nr_devices)
    if not fits:
        have = "; ".join(f"{','.join(v.platforms)} x {v.nr_devices}" for v in found.variants)
        raise NotFoundError(
            f"{reference}: no variant runs on {platform or 'any platform'} with "
            f"{nr_devices or 'any number of'} devices; it has {have}"
        )
    assemble(target, fits[0], path, CopyReport())
    return fits[0]
