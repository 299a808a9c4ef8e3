"""OCI content copied from one ``OciTarget`` to another as it is (an image layout to an OCI
registry, say: a bundle's versions onto an air-gapped site's own registry), by digest.

Every tag but the referrers fallback tags (``sha256-<hex>``, which the destination keeps
itself as referrers are pushed to it) is copied with everything it reaches: an index's
manifests, a manifest's config and layers, and the referrers of each manifest (signatures,
findings). A blob or manifest the destination holds is not sent again, so a second copy sends
nothing. Each manifest is checked as any jaxport reads one (``parse_manifest``, ``parse_index``:
size, media type, descriptors) and fetched by digest verified; each blob is verified by both
targets (``OciTarget.fetch_blob`` and ``push_blob``).
"""

from __future__ import annotations

from jaxport import IntegrityError, NotFoundError, OciError
from jaxport.registry._oci_media import (
    FINDINGS,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    SIGNATURE,
    Descriptor,
    hex_of,
    parse_index,
    parse_manifest,
    sha256_of,
)
from jaxport.registry._oci_referrers import distinct_referrers
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_target import OciTarget

__all__ = ["copy_repository"]

#: How deep an index may nest indexes (a jaxport version's is 1).
MAX_DEPTH = 4


def copy_repository(src: OciTarget, dst: OciTarget, name: str, report: CopyReport) -> None:
    """Copies every tag of ``src`` (the repository of ``name``) to ``dst`` (``report``: a
    referrer copied counts as one signature or one findings entry, whatever rows it holds).

    Raises:
        OciError: a malformed or over-limit manifest, an index nested too deep.
        IntegrityError: a manifest or blob that does not have its digest.
        NotFoundError: something a manifest lists is absent from ``src``.
    """
    copied: set[str] = set()
    for tag in sorted(src.tags()):
        if tag.startswith("sha256-"):
            continue
        media_type, body = src.fetch_manifest(tag)
        before = report.manifests
        _copy(src, dst, Descriptor.of(media_type, body), body, report, 0, copied)
        try:
            same = sha256_of(dst.fetch_manifest(tag)[1]) == sha256_of(body)
        except NotFoundError:
            same = False
        if not same:
            dst.push_manifest(tag, media_type, body)
            report.manifests += 1
        if report.manifests > before and tag[:1] == "v" and tag[1:].isdigit():
            report.versions.append(f"{name}:{tag[1:]}")
        elif report.manifests > before and not (tag[:1] == "v" and tag[1:].isdigit()):
            report.aliases.append(f"{name}@{tag}")


def _copy(
    src: OciTarget,
    dst: OciTarget,
    own: Descriptor,
    body: bytes,
    report: CopyReport,
    depth: int | None,
    copied: set[str],
) -> None:
    """Copies what the manifest or index ``body`` reaches, then ``body`` itself (untagged)
    where ``dst`` lacks it, then a manifest's referrers (``depth`` None: ``body`` is one).
    ``copied``: the digests (manifests, blobs) copied whole by this copy so far, each read and
    copied once however many paths reach it (indexes that list one child many times, nested, are
    exponentially many paths)."""
    if own.digest in copied:
        return
    if depth is not None and depth > MAX_DEPTH:
        raise OciError(f"{own.digest}: indexes nested more than {MAX_DEPTH} deep")
    if own.media_type == IMAGE_INDEX:
        for entry in parse_index(body, own.digest)["manifests"]:
            if entry.digest in copied:
                continue
            media_type, child = _fetch(src, entry)
            child_own = Descriptor(media_type, entry.digest, entry.size)
            _copy(src, dst, child_own, child, report, (depth or 0) + 1, copied)
        artifact = None
    elif own.media_type == IMAGE_MANIFEST:
        doc = parse_manifest(body, own.digest)
        for blob in (doc["config"], *doc["layers"]):
            if blob.digest not in copied:
                _send(src, dst, blob, report)
                copied.add(blob.digest)
        artifact = doc["artifactType"]
    else:
        raise OciError(f"{own.digest}: a {own.media_type:.80}, not a manifest or an index")
    if not _has_manifest(dst, own.digest):
        dst.push_manifest(None, own.media_type, body)
        report.manifests += 1
        if depth is None:  # a referrer, new at the destination
            report.signatures += artifact == SIGNATURE
            report.findings += artifact == FINDINGS
    if own.media_type == IMAGE_MANIFEST and depth is not None:
        for found in distinct_referrers(src.referrers(own.digest), own.digest):
            referrer = Descriptor(IMAGE_MANIFEST, str(found.get("digest", "")), 0)
            if referrer.digest not in copied and not _has_manifest(dst, referrer.digest):
                media_type, child = _fetch(src, referrer)
                _copy(src, dst, Descriptor(media_type, referrer.digest, len(child)), child,
                      report, None, copied)  # fmt: skip
    copied.add(own.digest)


def _fetch(src: OciTarget, entry: Descriptor) -> tuple[str, bytes]:
    hex_of(entry.digest)
    media_type, body = src.fetch_manifest(entry.digest)
    if sha256_of(body) != entry.digest:
        raise IntegrityError(
            f"manifest {entry.digest} reads as {sha256_of(body)}", expected=entry.hex,
            found=hex_of(sha256_of(body)),
        )  # fmt: skip
    return media_type, body


def _has_manifest(dst: OciTarget, digest: str) -> bool:
    try:
        dst.fetch_manifest(digest)
    except NotFoundError:
        return False
    return True


def _send(src: OciTarget, dst: OciTarget, blob: Descriptor, report: CopyReport) -> None:
    if dst.has_blob(blob.digest):
        report.blobs_present += 1
        return
    dst.push_blob(blob.digest, blob.size, src.fetch_blob(blob.digest, blob.size))
    report.blobs += 1
    report.bytes += blob.size
