"""The JSON documents ``OciRepository`` reads (``registry/_oci_client.py``): a manifest or
index (at most ``MANIFEST_LIMIT`` bytes, schemaVersion 2, of one of ``MEDIA_TYPES`` and the
media type the registry named), a referrer's descriptor in the fallback index, a page of the
tag list and its ``Link`` to the next."""

from __future__ import annotations

import json
from typing import Any

from jaxport import OciError
from jaxport.registry._oci_limits import MANIFEST_LIMIT, MEDIA_TYPES

__all__ = [
    "index_descriptors",
    "manifest_document",
    "next_link",
    "referrer_descriptor",
    "tag_page",
]


def manifest_document(body: bytes, media_type: str | None, what: str) -> dict[str, Any]:
    if len(body) > MANIFEST_LIMIT:
        raise OciError(f"{what}: {len(body)} bytes, over the {MANIFEST_LIMIT}-byte limit")
    if media_type is not None and media_type not in MEDIA_TYPES:
        raise OciError(
            f"{what}: media type {media_type[:80]!r} is not a manifest or index jaxport reads"
        )
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # nested deeper than the recursion limit
        raise OciError(f"{what}: not valid JSON") from None
    if not isinstance(document, dict) or document.get("schemaVersion") != 2:
        raise OciError(f"{what}: not a manifest (a JSON object with schemaVersion 2)")
    declared = document.get("mediaType")
    if media_type is not None and declared is not None and declared != media_type:
        raise OciError(f"{what}: its mediaType {str(declared)[:80]!r} is not {media_type!r}")
    return document


def referrer_descriptor(
    document: dict[str, Any], media_type: str, digest: str, size: int
) -> dict[str, Any]:
    """The descriptor of a referrer in the fallback index (``artifactType``: the manifest's,
    else its config's media type, as the spec says)."""
    descriptor: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
    config = document.get("config")
    artifact = document.get("artifactType") or (
        config.get("mediaType") if isinstance(config, dict) else None
    )
    if isinstance(artifact, str):
        descriptor["artifactType"] = artifact
    if isinstance(document.get("annotations"), dict):
        descriptor["annotations"] = document["annotations"]
    return descriptor


def index_descriptors(index: Any) -> list[dict[str, Any]]:
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or not all(isinstance(d, dict) for d in manifests):
        raise OciError("a referrers index holds no list of descriptors")
    return manifests


def tag_page(body: bytes) -> list[str]:
    try:
        tags = json.loads(body).get("tags")
    except (ValueError, AttributeError, RecursionError):
        raise OciError("the tag list is not a JSON object") from None
    if tags is None:
        return []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise OciError("the tag list's tags are not a list of strings")
    return tags


def next_link(header: str | None) -> str | None:
    if not header:
        return None
    for part in header.split(","):
        target, _, rest = part.partition(";")
        if 'rel="next"' in rest.replace(" ", "") or "rel=next" in rest.replace(" ", ""):
            return target.strip().strip("<>")
    return None
