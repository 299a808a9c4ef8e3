"""OCI content read back into a registry (``schema/OCI.md`` is normative;
``registry/_oci_push.py`` writes it).

``read_version`` reads a version (every manifest and config checked and verified; nothing
stored), ``assemble`` puts one variant's archive together from its layers (each verified by
the target, then the whole archive's sha256), ``pull_version`` pushes what it read into a
``Registry`` (any backend), with its signatures and findings where the backend can store
them. ``write_variant`` writes one variant's archive to a file, without a registry. The
writing side's names are re-exported here: this module is the mapping's one entry point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxport import (
    ConflictError,
    IntegrityError,
    JaxportError,
    NotFoundError,
    OciError,
    SignatureError,
    UnsupportedFeatureError,
)
from jaxport._io import create_temporary
from jaxport.export._internal import Part
from jaxport.registry._oci_hash import BackgroundSha256
from jaxport.registry._oci_media import (
    ANNOTATION,
    EMPTY_JSON,
    FINDINGS,
    IMAGE_INDEX,
    MAX_REFERRER_BYTES,
    SIGNATURE,
    VERSION,
    Descriptor,
    oci_digest,
    parse_index,
    parse_json,
    sha256_of,
)
from jaxport.registry._oci_push import alias_tag, push_version, registry_attached, version_tag
from jaxport.registry._oci_referrers import Attached, distinct_referrers, findings_rows
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_target import OciTarget
from jaxport.registry._oci_variant import OciVariant, read_variant

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import PushResult

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

_ZEROS = bytes(4096)


@dataclasses.dataclass(frozen=True)
class OciVersion:
    """A version as read from OCI content: its index's descriptor, the name and version its
    annotations record, the version's metadata, and its variants."""

    index: Descriptor
    name: str
    version: int | None
    metadata: dict[str, str]
    variants: tuple[OciVariant, ...]


def read_version(target: OciTarget, reference: str) -> OciVersion:
    """The version at ``reference`` (a tag or an index digest), every manifest and config
    fetched, verified and checked (see ``_oci_variant.read_variant``); no layer is read.

    Raises:
        NotFoundError: no such tag or manifest.
        OciError: not a jaxport version's index (one listing a variant twice included), or a
            malformed manifest or config.
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
    if len({d.digest for d in doc["manifests"]}) != len(doc["manifests"]):
        raise OciError(f"{reference}: a version's index lists a variant twice")
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
    padding between; the whole archive's sha256 is computed on another thread as the parts
    arrive and checked before the file is renamed to ``path`` (a failure leaves ``path`` as
    it was and no temporary file).

    Not fsynced: the file is a download (as ``oras pull`` or ``curl -o`` write one), or a
    temporary file that ``Registry.push`` copies into a store that syncs its own writes. The
    rename is atomic; after a power loss the file may be short or zeroed, which loading it
    reports (``CorruptArchiveError``, ``IntegrityError``: every section has its digest), and
    pulling again repairs.

    Raises:
        NotFoundError: a layer is absent.
        IntegrityError: a layer or the whole archive does not have its digest.
    """
    have: set[str] = set()
    if registry is not None and len(variant.parts) > 1:
        digests = [p.digest for p in variant.parts]
        with contextlib.suppress(UnsupportedFeatureError):
            have = set(digests) - set(registry.missing_blobs(digests))
    whole = BackgroundSha256()

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
    try:
        _write_verified(out, chunks(), whole, variant.digest)
    finally:
        whole.close()
    return out


def _write_verified(
    out: Path, chunks: Iterator[bytes], whole: BackgroundSha256, digest: str
) -> None:
    """Writes ``chunks`` to a temporary file beside ``out`` and renames it to ``out`` once
    ``whole`` (their sha256, hashed on another thread) is ``digest``; on any error the
    temporary file is removed and ``out`` is as it was. Not fsynced: a download (see
    ``assemble``)."""
    fd, tmp = create_temporary(out)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        found = whole.hexdigest()
        if found != digest:
            raise IntegrityError(
                f"the layers make an archive with sha256:{found[:12]}, not "
                f"sha256:{digest[:12]}", expected=digest, found=found,
            )  # fmt: skip
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _part(
    target: OciTarget, part: Part, have: set[str], registry: Registry | None, report: CopyReport
) -> Iterator[bytes]:
    if registry is not None and part.digest in have:
        report.blobs_present += 1
        try:  # a direct registry streams the part, verified as it goes
            yield from registry.blob_stream(part.digest).chunks()
        except UnsupportedFeatureError:  # through a server: one verified read
            yield registry.read_blob(part.digest)
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
        listed = target.referrers(v.manifest.digest)
        for found in distinct_referrers(listed, v.manifest.digest):
            doc = fetch_manifest_checked(target, found.get("digest", ""))
            if doc["subject"] is None or doc["subject"].digest != v.manifest.digest:
                continue  # a referrers list that names another subject's: ignored
            if doc["artifactType"] not in (SIGNATURE, FINDINGS) or len(doc["layers"]) != 1:
                continue  # referrers of other tools
            if doc["config"].media_type != EMPTY_JSON:
                raise OciError(f"referrer {found.get('digest')}: its config is not empty")
            data = fetch_small(target, doc["layers"][0], MAX_REFERRER_BYTES)
            if doc["artifactType"] == SIGNATURE:
                sigs.append(_signature(v.digest, data, doc["annotations"], found))
            else:
                rows += findings_rows(data, v.digest)
    return Attached(sigs, rows)


def _signature(
    digest: str, bundle: bytes, notes: dict[str, str], found: dict[str, Any]
) -> tuple[str, bytes, str, str]:
    """A signature referrer's bundle, signer and kind, checked before anything is stored.

    Raises:
        OciError: a signer that is not a sha256 fingerprint, a kind other than key or
            certificate, a bundle that is not a JSON object.
    """
    signer = notes.get(ANNOTATION["signer"], "")
    kind = notes.get(ANNOTATION["signature_kind"], "")
    where = f"signature referrer {found.get('digest')}"
    if not re.fullmatch(r"[0-9a-f]{64}", signer) or kind not in ("key", "certificate"):
        raise OciError(f"{where}: its signer or kind annotation is malformed")
    parse_json(bundle, where, MAX_REFERRER_BYTES)
    return digest, bundle, signer, kind


def pull_version(
    target: OciTarget, reference: str, registry: Registry, report: CopyReport, *,
    name: str | None = None, version: OciVersion | None = None,
) -> PushResult:  # fmt: skip
    """Pushes the version at ``reference`` into ``registry`` as ``name`` (default: the name
    its index records) with its metadata, then stores its signatures and findings where the
    registry can (a direct one, a server with the adopt routes; else a note says they were
    not stored). Nothing
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
    """Stores ``attached`` in ``registry`` at the version ``where`` (``NAME:VERSION``),
    counting only what is new. A signature that is not one of its archive
    (``registry/_adoption.py``), or whose signer has another stored there, is not stored: a
    note says so, as it does where the backend cannot store signatures or findings (a
    registry server older than the adopt routes; one without the signing extra stores the
    findings only).

    Raises:
        InvalidNameError: a finding that is not one.
    """
    backend = registry._backend
    name = where.rpartition(":")[0]
    lacking: list[tuple[str, UnsupportedFeatureError]] = []
    try:
        for digest, bundle, signer, kind in attached.signatures:
            before = {s.bundle_digest for s in registry.signatures(where)}
            try:
                stored = backend.adopt_signature(name, digest, bundle, signer, kind)
            except (ConflictError, SignatureError) as e:  # the source's, kept out
                report.notes.append(f"{where}: a signature not stored: {e}")
                continue
            report.signatures += stored.bundle_digest not in before
    except UnsupportedFeatureError as e:  # no route, or no signing extra where it is checked
        lacking.append(("signatures", e))
    try:
        if attached.findings:
            report.findings += backend.adopt_findings(name, attached.findings)
    except UnsupportedFeatureError as e:
        lacking.append(("findings", e))
    if lacking:
        what = " and ".join(w for w, _ in lacking)
        report.notes.append(f"{where}: {what} not stored: {lacking[0][1]}")


def write_variant(
    target: OciTarget, reference: str, path: str | os.PathLike[str], *,
    platform: str | None = None, nr_devices: int | None = None, report: CopyReport | None = None,
) -> OciVariant:  # fmt: skip
    """Writes the archive of the variant of the version at ``reference`` that runs on
    ``platform`` with ``nr_devices`` (None: any; as ``Registry.resolve`` chooses within a
    version) to ``path``, verified; returns the variant. ``report`` (optional) counts the
    layers fetched and their bytes.

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
    assemble(target, fits[0], path, CopyReport() if report is None else report)
    return fits[0]
