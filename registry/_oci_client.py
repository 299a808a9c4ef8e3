"""``OciRepository``: one repository of an OCI distribution-spec v1.1 registry, as an
``OciTarget`` (``registry/_oci_target.py``), over httpx.

- Blobs: ``HEAD`` says whether one is there; an upload is ``POST`` then one ``PUT`` up to
  ``MONOLITHIC_LIMIT``, else ``PATCH`` chunks of ``CHUNK_SIZE`` read from the iterator (one in
  memory at a time) and an empty ``PUT ?digest=``; the bytes are hashed as they go and a
  digest or size that does not match cancels the upload (``DELETE``) before the final ``PUT``:
  ``IntegrityError``, nothing stored. A read is streamed, its ``Content-Length`` checked
  before the first byte, its size and digest as it goes; the last chunk is handed over only
  once both match.
- Manifests: at most ``MANIFEST_LIMIT`` bytes, JSON objects of one of ``MEDIA_TYPES`` whose
  ``mediaType`` (where present) is the one the registry named; read by digest they must have
  it, read by tag they must have the ``Docker-Content-Digest`` the registry names.
- Referrers: ``GET /v2/<name>/referrers/<digest>``; where the registry answers 404 (it lacks
  the API, as docker-registry 2.8 does), the referrers tag ``sha256-<hex>``'s index. A
  manifest with a ``subject`` pushed to a registry that does not answer ``OCI-Subject`` is
  added to that index too (the spec's "referrers tag schema").
- Redirects: to the same origin (scheme, host, port), followed with the credentials; to
  another origin, followed only for a blob read, and without the credentials (a blob store's
  presigned URL: the digest is checked all the same); anywhere else an ``OciError``. A
  redirect from ``https`` to plain ``http`` is refused, even to this machine; from a registry
  spoken to in plain ``http``, one to plain ``http`` is followed where the target host may be
  spoken to so (``registry/_oci_url.py``).
- Encodings: every request asks for the bytes as they are (``Accept-Encoding: identity``)
  and every answer is read raw: a blob's bytes are hashed as sent, and a JSON answer sent
  gzip-, br- or zstd-encoded all the same is an ``OciError`` (httpx would decode it without
  a limit: 1 MiB of gzip is 1 GiB of JSON, 1 MiB of zstd 32 GiB).
- Time: httpx's ``timeout`` bounds each read of the socket; a JSON answer must also come
  whole within ``timeout`` seconds, and a blob at ``MIN_RATE`` bytes a second or faster
  over each window of ``timeout`` seconds (``registry/_oci_pace.py``: a slow drip).
- Bodies and documents: ``registry/_oci_bodies.py`` (blob bytes checked, answers bounded)
  and ``registry/_oci_documents.py`` (manifests, referrer descriptors, tag pages).
- Errors: 401 ``AuthenticationError``; 403 ``PermissionDeniedError``; 404 ``NotFoundError``;
  502, 503, 504 and unreachable ``ServerUnavailableError`` (reads are tried ``ATTEMPTS``
  times); any other non-2xx an ``OciError`` naming the registry's error code. The registry's
  own text is cut to ``ERROR_TEXT`` characters, with any credential or token replaced by ``***``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from jaxport import (
    AuthenticationError,
    IntegrityError,
    InvalidNameError,
    NotFoundError,
    OciError,
    PermissionDeniedError,
    ServerUnavailableError,
)
from jaxport.registry._oci_auth import (
    IDENTITY,
    OciAuth,
    find_credentials,
    tls_context,
)
from jaxport.registry._oci_bodies import (
    ChunkedBody,
    check_hash,
    gather_blob,
    read_limited,
    rechunk,
    sha256_digest,
    verified_chunks,
)
from jaxport.registry._oci_documents import (
    index_descriptors,
    manifest_document,
    next_link,
    referrer_descriptor,
    tag_page,
)
from jaxport.registry._oci_limits import (
    ATTEMPTS,
    CHUNK_SIZE,
    ERROR_TEXT,
    MANIFEST_LIMIT,
    MAX_TAGS,
    MEDIA_TYPES,
    MONOLITHIC_LIMIT,
    REDIRECTS,
    TAG_PAGES,
)
from jaxport.registry._oci_transport import large_read_transport
from jaxport.registry._oci_url import OciUrl, is_loopback, parse_oci_url

__all__ = ["INDEX_TYPE", "OciRepository", "referrers_tag", "sha256_digest"]

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
_RETRY_STATUS = frozenset({502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_OCTETS = {"Content-Type": "application/octet-stream"}


def referrers_tag(digest: str) -> str:
    """The referrers fallback tag of ``digest``: ``sha256:<hex>`` -> ``sha256-<hex>``."""
    return digest.replace(":", "-", 1)


def _check_digest(digest: str) -> None:
    if not (
        digest.startswith("sha256:")
        and len(digest) == 71
        and all(c in "0123456789abcdef" for c in digest[7:])
    ):
        raise InvalidNameError(
            f"an OCI digest is sha256: and 64 lower-case hex digits (got {digest[:80]!r})"
        )


class OciRepository:
    """One repository of an OCI registry: an ``OciTarget`` (see the module's doc).

    Args:
        url: ``oci://HOST[:PORT]/REPO[:TAG]`` (the tag, if any, is ignored here), or a parsed
            ``OciUrl``.
        insecure: plain ``http`` allowed to a host that is not a loopback address (None reads
            ``JAXPORT_OCI_INSECURE``).
        timeout: seconds a connection or a read may wait.

    Attributes:
        url: the parsed URL.
        bytes_sent: request body bytes sent so far (blobs and manifests), for benchmarks.

    Raises:
        InvalidNameError: the URL is not ``oci://HOST/REPO[:TAG]``.
        OciError: the credentials' configuration is unreadable (``find_credentials``).
    """

    def __init__(self, url: str | OciUrl, *, insecure: bool | None = None, timeout: float = 300.0):
        self.url = url if isinstance(url, OciUrl) else parse_oci_url(url, insecure=insecure)
        #: plain http allowed to any host (``insecure``), not only to loopback addresses
        self._insecure = self.url.scheme == "http" and not is_loopback(self.url.host)
        self._timeout = timeout
        credentials, note = find_credentials(self.url.host)
        self._auth = OciAuth(
            credentials,
            note,
            insecure=self._insecure,
            https=self.url.scheme == "https",
            timeout=timeout,
        )
        limits = httpx.Timeout(timeout, connect=10.0)
        self._client = httpx.Client(
            auth=self._auth,
            headers=IDENTITY,
            timeout=limits,
            follow_redirects=False,
            trust_env=False,
            transport=large_read_transport(tls_context()),
        )
        self._bare = httpx.Client(
            headers=IDENTITY,
            timeout=limits,
            follow_redirects=False,
            trust_env=False,
            transport=large_read_transport(tls_context()),
        )
        self.bytes_sent = 0
        weakref.finalize(self, self._client.close)
        weakref.finalize(self, self._bare.close)
        weakref.finalize(self, self._auth.close)

    def __repr__(self) -> str:
        return f"OciRepository({str(self.url)!r})"

    def close(self) -> None:
        """Closes the connections."""
        self._client.close()
        self._bare.close()
        self._auth.close()

    def __enter__(self) -> OciRepository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- blobs ------------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        """Whether the blob ``digest`` is in the repository (``HEAD``)."""
        _check_digest(digest)
        response = self._send("HEAD", self._path("blobs", digest), follow_other=True)
        if response.status_code == 404:
            return False
        self._raise_for(response, f"blob {digest[:19]}")
        return True

    def mount_blob(self, digest: str, from_repository: str) -> bool:
        """Asks the registry to mount ``digest`` from another repository of the same registry
        (``POST ?mount=&from=``); True when it did, False when it opened an upload instead
        (which is cancelled): the caller pushes the blob then."""
        _check_digest(digest)
        path = f"/v2/{self.url.repository}/blobs/uploads/"
        response = self._send("POST", path, params={"mount": digest, "from": from_repository})
        if response.status_code == 201:
            return True
        self._raise_for(response, f"mount of blob {digest[:19]}")
        self._cancel(self._location(response))
        return False

    def push_blob(self, digest: str, size: int, chunks: Iterable[bytes]) -> None:
        """Uploads a blob of ``size`` bytes read from ``chunks`` (see the module's doc).

        Raises:
            IntegrityError: the bytes are more or fewer than ``size``, or not ``digest``'s;
                the upload is cancelled, nothing is stored.
            OciError: the registry refused the upload, or redirected it to another host.
        """
        _check_digest(digest)
        response = self._send("POST", f"/v2/{self.url.repository}/blobs/uploads/")
        self._raise_for(response, f"upload of blob {digest[:19]}")
        location = self._location(response)
        try:
            if size <= MONOLITHIC_LIMIT:
                data = gather_blob(chunks, size, digest)
                location = self._put_blob(location, digest, data)
            else:
                location = self._patch_chunks(location, digest, size, chunks)
                self._put_blob(location, digest, b"")
        except BaseException:
            self._cancel(location)
            raise

    def _patch_chunks(
        self, location: httpx.URL, digest: str, size: int, chunks: Iterable[bytes]
    ) -> httpx.URL:
        hasher, offset = hashlib.sha256(), 0
        for piece in rechunk(chunks, CHUNK_SIZE):
            if offset + len(piece) > size:
                raise IntegrityError(
                    f"blob {digest[:19]}: more than its {size} bytes", expected=digest
                )
            hasher.update(piece)
            headers = {**_OCTETS, "Content-Range": f"{offset}-{offset + len(piece) - 1}"}
            response = self._send_bytes("PATCH", location, piece, headers)
            self._raise_for(response, f"upload of blob {digest[:19]}")
            self.bytes_sent += len(piece)
            offset += len(piece)
            location = self._location(response)
        check_hash(digest, size, offset, "sha256:" + hasher.hexdigest())
        return location

    def _put_blob(self, location: httpx.URL, digest: str, data: bytes) -> httpx.URL:
        url = location.copy_merge_params({"digest": digest})
        response = self._send_bytes("PUT", url, data, _OCTETS)
        self.bytes_sent += len(data)
        self._raise_for(response, f"upload of blob {digest[:19]}")
        return location

    def _send_bytes(
        self, method: str, url: httpx.URL, data: bytes, headers: dict[str, str]
    ) -> httpx.Response:
        """``data`` sent in 1 MiB pieces with its length declared, then let go of: httpx's
        response and request refer to each other, so without ``release`` every chunk sent
        would stay in memory until the garbage collector's next cycle."""
        body = ChunkedBody(data)
        try:
            headers = {**headers, "Content-Length": str(len(data))}
            return self._send(method, url, content=body, headers=headers)
        finally:
            body.release()

    def _cancel(self, location: httpx.URL) -> None:
        with contextlib.suppress(Exception):  # the registry expires abandoned uploads itself
            self._send("DELETE", location)

    def fetch_blob(self, digest: str, size: int) -> Iterator[bytes]:
        """The blob's bytes in chunks of at most 1 MiB (iterate to the end, or ``close()``).

        Raises:
            NotFoundError: no such blob (raised here, before iterating).
            IntegrityError: the registry announces or sends more or fewer than ``size`` bytes,
                or bytes that are not ``digest``'s (raised before the last chunk is handed over).
        """
        _check_digest(digest)
        response = self._send("GET", self._path("blobs", digest), stream=True, follow_other=True)
        try:
            self._raise_for(response, f"blob {digest[:19]}")
            announced = response.headers.get("Content-Length")
            if announced is not None and announced.isdigit() and int(announced) != size:
                raise IntegrityError(
                    f"blob {digest[:19]}: the registry announces {announced} bytes, not {size}",
                    expected=digest,
                )
        except BaseException:
            response.close()
            raise
        return verified_chunks(response, digest, size, self._timeout)

    # -- manifests --------------------------------------------------------------------------

    def push_manifest(self, reference: str | None, media_type: str, body: bytes) -> str:
        """Stores a manifest or index, tagged ``reference`` or by its digest (None).

        Returns:
            its digest.

        Raises:
            OciError: ``body`` is over ``MANIFEST_LIMIT``, not a JSON object, or of a media type
                not in ``MEDIA_TYPES``; or the registry refused it.
            IntegrityError: the registry names another digest than the body's.
        """
        document = manifest_document(body, media_type, "the manifest to push")
        digest = sha256_digest(body)
        response = self._send(
            "PUT",
            self._path("manifests", reference or digest),
            content=body,
            headers={"Content-Type": media_type},
        )
        self._raise_for(response, f"manifest {reference or digest[:19]}")
        self.bytes_sent += len(body)
        named = response.headers.get("Docker-Content-Digest")
        if named is not None and named != digest:
            raise IntegrityError(
                f"the registry stored manifest {digest[:19]} as {named[:19]}",
                expected=digest,
                found=named,
            )
        subject = document.get("subject")
        if isinstance(subject, dict) and "OCI-Subject" not in response.headers:
            self._add_referrer(
                subject, referrer_descriptor(document, media_type, digest, len(body))
            )
        return digest

    def fetch_manifest(self, reference: str) -> tuple[str, bytes]:
        """A manifest or index by tag or digest: its media type and bytes (checked as the
        module's doc says).

        Raises:
            NotFoundError: no such tag or manifest.
            OciError: over ``MANIFEST_LIMIT``, not JSON, or of another media type.
            IntegrityError: the bytes do not have the digest asked for or named.
        """
        by_digest = reference.startswith("sha256:")
        if by_digest:
            _check_digest(digest=reference)
        headers = {"Accept": ", ".join(MEDIA_TYPES)}
        response = self._send(
            "GET", self._path("manifests", reference), headers=headers, stream=True
        )
        body = self._answer(response, f"manifest {reference[:19]}")
        media_type = response.headers.get("Content-Type", "").partition(";")[0].strip()
        document = manifest_document(body, media_type or None, f"manifest {reference[:19]}")
        media_type = media_type or str(document.get("mediaType", ""))
        digest = sha256_digest(body)
        expected = reference if by_digest else response.headers.get("Docker-Content-Digest")
        if expected is not None and expected != digest:
            raise IntegrityError(
                f"manifest {reference[:19]}: its bytes are not {expected[:19]}",
                expected=expected,
                found=digest,
            )
        return media_type, body

    # -- referrers and tags -----------------------------------------------------------------

    def referrers(self, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """The descriptors of the manifests whose ``subject`` is ``digest``, of
        ``artifact_type`` if given (the API, else the ``sha256-<hex>`` tag's index)."""
        _check_digest(digest)
        params = {"artifactType": artifact_type} if artifact_type else None
        headers = {"Accept": INDEX_TYPE}
        response = self._send(
            "GET", self._path("referrers", digest), params=params, headers=headers, stream=True
        )
        if response.status_code == 404:
            response.close()
            return self._fallback_referrers(digest, artifact_type)
        body = self._answer(response, f"referrers of {digest[:19]}")
        found = index_descriptors(manifest_document(body, None, f"referrers of {digest[:19]}"))
        return [d for d in found if artifact_type is None or d.get("artifactType") == artifact_type]

    def _fallback_referrers(self, digest: str, artifact_type: str | None) -> list[dict[str, Any]]:
        try:
            _, body = self.fetch_manifest(referrers_tag(digest))
        except NotFoundError:
            return []
        found = index_descriptors(json.loads(body))
        return [d for d in found if artifact_type is None or d.get("artifactType") == artifact_type]

    def _add_referrer(self, subject: dict[str, Any], descriptor: dict[str, Any]) -> None:
        target = subject.get("digest")
        if not isinstance(target, str):
            raise OciError("the manifest's subject has no digest")
        _check_digest(target)
        try:
            _, body = self.fetch_manifest(referrers_tag(target))
            index = json.loads(body)
        except NotFoundError:
            index = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": []}
        manifests = index_descriptors(index)
        if any(d.get("digest") == descriptor["digest"] for d in manifests):
            return
        index["manifests"] = [*manifests, descriptor]
        body = json.dumps(index, separators=(",", ":"), sort_keys=True).encode()
        self.push_manifest(referrers_tag(target), INDEX_TYPE, body)

    def tags(self) -> list[str]:
        """The repository's tags, every page (``Link: <...>; rel="next"``, same origin);
        none for a repository the registry does not know.

        Raises:
            OciError: a page links to one read already (a loop), or the list runs over
                ``TAG_PAGES`` pages or ``MAX_TAGS`` tags.
        """
        url: str | httpx.URL = f"/v2/{self.url.repository}/tags/list"
        params: dict[str, str] | None = {"n": "1000"}
        found: list[str] = []
        read: set[httpx.URL] = set()
        for _ in range(TAG_PAGES):
            response = self._send("GET", url, params=params, stream=True)
            if response.status_code == 404:
                response.close()
                return found
            body = self._answer(response, "tag list")
            read.add(response.request.url)
            found += tag_page(body)
            if len(found) > MAX_TAGS:
                raise OciError(f"the tag list has more than {MAX_TAGS} tags")
            link = next_link(response.headers.get("Link"))
            if link is None:
                return found
            url, params = self._same_origin(response.request.url.join(link), "tag list"), None
            if url in read:
                raise OciError("the tag list's pages loop (a page links to one read already)")
        raise OciError(f"the tag list has more than {TAG_PAGES} pages")

    # -- requests ---------------------------------------------------------------------------

    def _path(self, kind: str, reference: str) -> str:
        return f"/v2/{self.url.repository}/{kind}/{reference}"

    def _location(self, response: httpx.Response) -> httpx.URL:
        location = response.headers.get("Location")
        if not location:
            raise OciError(
                f"the registry answered HTTP {response.status_code} to an upload without a Location"
            )
        return self._same_origin(response.request.url.join(location), "upload")

    def _same_origin(self, url: httpx.URL, what: str) -> httpx.URL:
        if (url.scheme, url.netloc.decode()) != (self.url.scheme, self.url.host):
            raise OciError(
                f"{what}: the registry {self.url.host} sent jaxport to another host ({url.host})"
            )
        return url

    def _send(
        self,
        method: str,
        url: str | httpx.URL,
        *,
        stream: bool = False,
        follow_other: bool = False,
        **kwargs: Any,
    ) -> httpx.Response:
        """One request, its redirects followed as the module's doc says; a read retried."""
        target = httpx.URL(self.url.base + url) if isinstance(url, str) else url
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = self._follow(method, target, stream, follow_other, kwargs)
            except httpx.TransportError as e:
                if method in ("GET", "HEAD") and attempt < ATTEMPTS:
                    time.sleep(0.2 * 2**attempt)
                    continue
                raise ServerUnavailableError(
                    f"the OCI registry {self.url.host} could not be reached: {type(e).__name__}"
                ) from None
            except httpx.HTTPError as e:
                raise OciError(f"the OCI registry {self.url.host}: {type(e).__name__}") from None
            if (
                response.status_code in _RETRY_STATUS
                and method in ("GET", "HEAD")
                and attempt < ATTEMPTS
            ):
                response.close()
                time.sleep(0.2 * 2**attempt)
                continue
            return response
        raise AssertionError("unreachable")

    def _follow(
        self, method: str, url: httpx.URL, stream: bool, follow_other: bool, kwargs: dict[str, Any]
    ) -> httpx.Response:
        client = self._client
        for _ in range(REDIRECTS + 1):
            request = client.build_request(method, url, **kwargs)
            response = client.send(request, stream=True)
            if response.status_code not in _REDIRECT_STATUS or "Location" not in response.headers:
                if stream:
                    return response
                body = read_limited(response, 1 << 16, "an answer", self._timeout, cut=True)
                headers = [
                    (k, v) for k, v in response.headers.multi_items() if k != "content-encoding"
                ]  # the raw bytes kept: httpx would decode them again, without a limit
                return httpx.Response(
                    response.status_code, headers=headers, content=body, request=request
                )
            response.close()
            url = url.join(response.headers["Location"])
            if (url.scheme, url.netloc.decode()) != (self.url.scheme, self.url.host):
                client = self._redirect_client(url, method, follow_other)
        raise OciError(f"the registry {self.url.host} redirected more than {REDIRECTS} times")

    def _redirect_client(self, url: httpx.URL, method: str, follow_other: bool) -> httpx.Client:
        if not follow_other or method not in ("GET", "HEAD"):
            raise OciError(
                f"the registry {self.url.host} redirected a {method} to another host "
                f"({url.host}): refused"
            )
        plain_ok = self.url.scheme == "http" and (
            self._insecure or is_loopback(url.netloc.decode())
        )
        if url.scheme != "https" and not plain_ok:
            raise OciError(
                f"the registry {self.url.host} redirected a blob read to plain http on "
                f"{url.host}: refused"
            )
        return self._bare  # no credentials to another origin

    def _answer(self, response: httpx.Response, what: str) -> bytes:
        """A streamed answer's body, at most ``MANIFEST_LIMIT`` bytes; the response closed."""
        try:
            self._raise_for(response, what)
            return read_limited(response, MANIFEST_LIMIT, what, self._timeout)
        finally:
            response.close()

    def _raise_for(self, response: httpx.Response, what: str) -> None:
        status = response.status_code
        if status < 300:
            return
        body = (
            response.content
            if response.is_stream_consumed
            else read_limited(response, 1 << 16, what, self._timeout, cut=True)
        )
        where, detail = f"{what} in {self.url}", self._error_text(body)
        if status == 401:
            who = "these credentials" if self._auth.credentials else "anonymous access"
            raise AuthenticationError(
                f"{where}: the registry refused {who} (HTTP 401){self._auth.note}"
            )
        if status == 403:
            raise PermissionDeniedError(f"{where}: the registry refused it (HTTP 403){detail}")
        if status == 404:
            raise NotFoundError(f"{where}: not found (HTTP 404){detail}")
        if status in _RETRY_STATUS:
            raise ServerUnavailableError(f"{where}: the registry is unavailable (HTTP {status})")
        raise OciError(f"{where}: the registry answered HTTP {status}{detail}")

    def _error_text(self, body: bytes) -> str:
        try:
            errors = json.loads(body)["errors"]
            text = "; ".join(
                f"{e.get('code', '')} {e.get('message', '')}".strip() for e in errors[:3]
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return ""
        for secret in self._auth.secrets():
            text = text.replace(secret, "***")
        text = "".join(c if c.isprintable() else "?" for c in text)[:ERROR_TEXT]
        return f": {text}" if text else ""
