"""Referrers (OCI 1.1 ``subject``): a variant's signatures and audit findings as manifests that
point at the variant's manifest, and the referrers tag schema that stands in for the
referrers API where a registry (or an image layout) lacks it.

The fallback (distribution-spec v1.1, "referrers tag schema"): the referrers of ``sha256:<hex>``
are listed in an image index tagged ``sha256-<hex>``; whoever pushes a manifest with a
``subject`` there adds its descriptor to that index (``with_referrer``), keeping the entries
already in it. ``registry/_oci_layout.py`` does so on every push; an HTTP client does so where
the registry answers the referrers API with 404.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jaxport import OciError
from jaxport.registry._oci_media import (
    ANNOTATION,
    EMPTY_CONFIG,
    EMPTY_JSON,
    FINDINGS,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MAX_REFERRER_BYTES,
    SIGNATURE,
    Descriptor,
    canonical,
    hex_of,
    parse_index,
    parse_json,
    parse_manifest,
)
from jaxport.registry._types import FINDING_FIELDS

__all__ = [
    "MAX_REFERRERS",
    "Attached",
    "distinct_referrers",
    "fallback_tag",
    "findings_layer",
    "findings_manifest",
    "findings_rows",
    "referrer_descriptor",
    "signature_manifest",
    "with_referrer",
]


@dataclasses.dataclass(frozen=True)
class Attached:
    """A variant's referrers, read and checked: signatures ``(digest, bundle, signer,
    kind)`` and findings rows."""

    signatures: list[tuple[str, bytes, str, str]]
    findings: list[dict[str, Any]]


#: The most referrers read of one manifest: a variant has a few signatures and findings; a
#: registry's list (a 4 MiB index holds some 50,000) is read manifest by manifest.
MAX_REFERRERS = 10_000


def distinct_referrers(listed: Sequence[dict[str, Any]], subject: str) -> list[dict[str, Any]]:
    """A referrers list as read: each digest once, in the order first listed.

    Raises:
        OciError: more than ``MAX_REFERRERS`` distinct digests.
    """
    first: dict[Any, dict[str, Any]] = {}
    for descriptor in listed:
        first.setdefault(descriptor.get("digest"), descriptor)
        if len(first) > MAX_REFERRERS:
            raise OciError(f"{subject} lists more than {MAX_REFERRERS} referrers")
    return list(first.values())


def fallback_tag(digest: str) -> str:
    """The referrers tag of ``digest``: ``sha256-<hex>``."""
    return "sha256-" + hex_of(digest)


def with_referrer(index: bytes | None, referrer: Descriptor) -> bytes:
    """The fallback index ``index`` (None: none yet) with ``referrer`` added once.

    Raises:
        OciError: ``index`` is not an image index (see ``parse_index``).
    """
    entries = [] if index is None else parse_index(index, "a referrers index")["manifests"]
    if all(e.digest != referrer.digest for e in entries):
        entries.append(referrer)
    return canonical(
        {"schemaVersion": 2, "mediaType": IMAGE_INDEX,
         "manifests": [e.to_json() for e in entries]}
    )  # fmt: skip


def referrer_descriptor(body: bytes) -> tuple[Descriptor, Descriptor] | None:
    """Of a manifest ``body`` with a ``subject``: its descriptor as a referrers list gives it
    (``artifactType``, annotations) and the subject; None without a subject.

    Raises:
        OciError: ``body`` is not an image manifest.
    """
    doc = parse_manifest(body, "a manifest")
    if doc["subject"] is None:
        return None
    artifact = doc["artifactType"] or doc["config"].media_type
    own = Descriptor.of(IMAGE_MANIFEST, body, doc["annotations"], artifact)
    return own, doc["subject"]


def signature_manifest(
    subject: Descriptor, bundle: Descriptor, signer: str, kind: str, created: str
) -> bytes:
    """The referrer manifest of one model-signing Sigstore bundle of the variant ``subject``."""
    notes = {ANNOTATION["signer"]: signer, ANNOTATION["signature_kind"]: kind,
             ANNOTATION["created"]: created}  # fmt: skip
    return _referrer(SIGNATURE, subject, bundle, notes)


def findings_manifest(subject: Descriptor, layer: Descriptor) -> bytes:
    """The referrer manifest of the audit findings (one JSON layer) of the variant
    ``subject``."""
    return _referrer(FINDINGS, subject, layer, {})


def findings_layer(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The findings layer: ``{"findings": [row, ...]}``, rows in a stable order."""
    kept = [{k: r[k] for k in FINDING_FIELDS} for r in rows]
    kept.sort(key=lambda r: canonical(r))
    return canonical({"findings": kept})


def findings_rows(layer: bytes, digest: str) -> list[dict[str, Any]]:
    """The rows of a findings layer, each checked and about the archive ``digest`` (hex).

    Raises:
        OciError: over ``MAX_REFERRER_BYTES``, not the layer's JSON, a field of the wrong
            type, or a finding of another archive.
    """
    from jaxport import OciError

    doc = parse_json(layer, "a findings layer", MAX_REFERRER_BYTES)
    rows = doc.get("findings")
    if not isinstance(rows, list):
        raise OciError("a findings layer without its findings list")
    out = []
    for row in rows:
        if not isinstance(row, dict) or set(row) != set(FINDING_FIELDS):
            raise OciError(f"a finding has the fields {', '.join(FINDING_FIELDS)}")
        if row["digest"] != digest:
            raise OciError("a finding of another archive than its subject's")
        _check_finding(row)
        out.append(row)
    return out


def _check_finding(row: Mapping[str, Any]) -> None:
    from jaxport import OciError

    texts = ("level", "jax_version", "jaxlib_version", "platform", "status", "reason",
             "details_json")  # fmt: skip
    if not all(isinstance(row[k], str) and len(row[k]) <= 1 << 16 for k in texts):
        raise OciError("a finding's text fields must be strings of at most 64 KiB")
    numbers = ("seconds", "created_at")
    if not all(isinstance(row[k], int | float) and not isinstance(row[k], bool) for k in numbers):
        raise OciError("a finding's seconds and created_at must be numbers")
    if row["devices"] is not None and (
        isinstance(row["devices"], bool) or not isinstance(row["devices"], int)
    ):
        raise OciError("a finding's devices must be an integer or null")
    if row["examples_digest"] is not None and not isinstance(row["examples_digest"], str):
        raise OciError("a finding's examples_digest must be a string or null")


def _referrer(
    artifact_type: str, subject: Descriptor, layer: Descriptor, notes: Mapping[str, str]
) -> bytes:
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": IMAGE_MANIFEST,
        "artifactType": artifact_type,
        "config": Descriptor.of(EMPTY_JSON, EMPTY_CONFIG).to_json(),
        "layers": [layer.to_json()],
        "subject": subject.to_json(),
    }
    if notes:
        doc["annotations"] = dict(notes)
    return canonical(doc)
