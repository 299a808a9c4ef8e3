"""Presigned URLs of an S3 blob store: bytes go between a client and the store, not through
the registry server (``server/_presign.py`` decides who gets which URL).

A store that can sign (``FsspecBlobStore`` over s3fs: S3, MinIO, R2, Ceph) has ``urls``, a
``StoreUrls``; any other has ``urls = None`` (``signing``: the one place that asks). What a URL
may do is fixed by its signature (AWS Signature Version 4, query-string form):

- ``put_url``: one PUT of one part to its **staging key** ``<root>/staging/<upload>/<digest>``
  (never its content-addressed key, so an unfinished upload never shows as a blob), with the
  part's sha256 signed in as the ``x-amz-checksum-sha256`` header and its length as
  ``Content-Length``: S3 refuses a body whose sha256 is not the digest (``BadDigest``) and any
  other header value (``SignatureDoesNotMatch``).
- ``get_url``: one GET of one blob.
- Both expire after ``expires`` seconds (S3: at most 7 days).

Once uploaded, the server checks a staged part without reading it (``take``: a HEAD with
``ChecksumMode=ENABLED`` gives its size and the sha256 S3 computed), then moves it to its
content-addressed key with a server-side copy (S3 computes the copy's sha256 again,
``ChecksumAlgorithm=SHA256``), so a blob's recorded checksum is the store's own (``stat``).
Staging keys are temporary files to ``BlobStore.strays``: ``gc`` removes those older than its
``temp_age``.

Raises (every method):
    RegistryError: the store refuses or cannot be reached (messages masked).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from jaxport import InvalidNameError
from jaxport.registry._names import check_digest

__all__ = ["MAX_PUT", "StoreUrls", "staging_key"]

#: Most bytes one PUT may carry on S3 (5 GiB): a larger part goes through the server.
MAX_PUT = 5 * 1024**3
_UPLOAD = re.compile(r"[0-9a-f]{32}")


def staging_key(upload: str, digest: str) -> str:
    """The key of ``digest``'s part in ``upload``, relative to the store's root.

    Raises:
        InvalidNameError: a malformed digest or upload id.
    """
    if not _UPLOAD.fullmatch(upload):
        raise InvalidNameError(f"an upload id is 32 lowercase hex digits, not {upload!r:.40}")
    return f"staging/{upload}/{check_digest(digest)}"


def _b64(digest: str) -> str:
    return base64.b64encode(bytes.fromhex(check_digest(digest))).decode("ascii")


def _hex(b64: object) -> str | None:
    """A ``ChecksumSHA256`` (base64) as hex; None if absent or not one (a multipart
    upload's ``<b64>-<parts>`` checksum of checksums is no sha256 of the bytes)."""
    if not isinstance(b64, str):
        return None
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


class StoreUrls:
    """Presigned URLs and server-side checks of one S3 blob store (see the module's doc).

    Args:
        fs: the store's ``s3fs.S3FileSystem``.
        root: the store's root, ``bucket/prefix`` (no protocol).
        errors: the store's exception boundary (``FsspecBlobStore._errors``).
    """

    def __init__(
        self, fs: Any, root: str, errors: Callable[[str], AbstractContextManager[None]]
    ) -> None:
        self._fs = fs
        self._root = root
        self._errors = errors

    def _split(self, relative: str) -> tuple[str, str]:
        bucket, key, _ = self._fs.split_path(f"{self._root}/{relative}")
        return str(bucket), str(key)

    def _blob(self, digest: str) -> str:
        return f"sha256/{check_digest(digest)[:2]}/{digest}"

    #: Most bytes one presigned PUT may carry: a larger part goes through the server.
    max_put = MAX_PUT

    def get_url(self, digest: str, expires: int) -> str:
        """A URL that GETs blob ``digest`` (HTTP ranges too) for ``expires`` seconds."""
        bucket, key = self._split(self._blob(digest))
        with self._errors(f"signing a read of blob {digest}"):
            return str(self._url("get_object", expires, Bucket=bucket, Key=key))

    def put_url(
        self, upload: str, digest: str, size: int, expires: int
    ) -> tuple[str, dict[str, str]]:
        """A URL that PUTs ``size`` bytes whose sha256 is ``digest`` to its staging key in
        ``upload`` for ``expires`` seconds, and the headers the PUT must send (signed into the
        URL: another value is refused)."""
        bucket, object_key = self._split(staging_key(upload, digest))
        checksum = _b64(digest)
        with self._errors(f"signing an upload of {digest}"):
            url = self._url(
                "put_object", expires, Bucket=bucket, Key=object_key,
                ChecksumSHA256=checksum, ContentLength=size,
            )  # fmt: skip
        return str(url), {"x-amz-checksum-sha256": checksum, "Content-Length": str(size)}

    def _url(self, method: str, expires: int, **params: Any) -> Any:
        bucket = params.pop("Bucket")
        key = params.pop("Key")
        return self._fs.url(f"{bucket}/{key}", expires=expires, client_method=method, **params)

    def take(self, upload: str, digest: str) -> int | None:
        """Stores the part ``digest`` uploaded to its staging key in ``upload`` as a blob, if
        the store computed that sha256 for it (``promote``); returns its size, or None where
        there is no such part (or another one, which is deleted)."""
        key = staging_key(upload, digest)
        found = self._head(key)
        if found is None:
            return None
        if found[1] != digest:
            self._discard(key)
            return None
        self._promote(key, digest)
        return found[0]

    def stat(self, digest: str) -> tuple[int, str | None] | None:
        """``(size in bytes, the sha256 hex the store recorded or None)`` of blob ``digest``
        (a HEAD); None if there is none."""
        return self._head(self._blob(digest))

    def _head(self, key: str) -> tuple[int, str | None] | None:
        bucket, object_key = self._split(key)
        with self._errors(f"looking at {key}"):
            try:
                head = self._fs.call_s3(
                    "head_object", Bucket=bucket, Key=object_key, ChecksumMode="ENABLED"
                )
            except FileNotFoundError:
                return None
        return int(head["ContentLength"]), _hex(head.get("ChecksumSHA256"))

    def _promote(self, key: str, digest: str) -> None:
        """Copies the object at ``key`` to blob ``digest``'s key inside the store (no byte
        through this process; S3 computes the copy's sha256), then deletes ``key``."""
        bucket, source = self._split(key)
        _, target = self._split(self._blob(digest))
        with self._errors(f"storing the uploaded part {digest}"):
            self._fs.call_s3(
                "copy_object", Bucket=bucket, Key=target,
                CopySource={"Bucket": bucket, "Key": source}, ChecksumAlgorithm="SHA256",
            )  # fmt: skip
            self._fs.invalidate_cache(f"{bucket}/{target}")
        self._discard(key)

    def sweep(self, older_than: float) -> list[str]:
        """Deletes the staged parts older than ``older_than`` seconds (uploads never
        completed: a server sweeps them when it starts); returns their keys, relative to the
        root. Lists the staging prefix only."""
        from jaxport.registry._blobs import age_of

        with self._errors("listing staged parts"):
            try:
                found = self._fs.find(f"{self._root}/staging", detail=True)
            except FileNotFoundError:
                found = {}
        prefix = self._fs._strip_protocol(self._root).rstrip("/") + "/"
        removed = []
        for path, info in sorted(found.items()):
            relative = str(path).removeprefix(prefix)
            parts = relative.split("/")
            if len(parts) == 3 and _UPLOAD.fullmatch(parts[1]) and age_of(info) >= older_than:
                self._discard(relative)
                removed.append(relative)
        return removed

    def _discard(self, key: str) -> None:
        bucket, object_key = self._split(key)
        with self._errors(f"removing {key}"):
            self._fs.call_s3("delete_object", Bucket=bucket, Key=object_key)
