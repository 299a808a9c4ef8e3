"""Credentials for an OCI registry, and the auth flows of the distribution spec, as an
``httpx.Auth``.

Where credentials come from, first found wins:

1. ``JAXPORT_OCI_USERNAME`` and ``JAXPORT_OCI_PASSWORD`` (both, or neither): sent to whichever
   OCI registry this process addresses, so set them for one registry at a time (a mirror
   between two registries takes per-host credentials from the Docker config instead);
2. the Docker config's ``auths`` entry for the host (``$DOCKER_CONFIG/config.json``, else
   ``~/.docker/config.json``; keys ``host[:port]``, with or without ``https://`` and a path),
   its base64 ``auth`` (``user:password``) or ``username`` / ``password``;
3. none: anonymous. Credential helpers (``credHelpers``, ``credsStore``) and ``identitytoken``
   are not run; where one names the host and the registry asks for credentials, the
   ``AuthenticationError`` says so and names the two variables.

The flows (``OciAuth``): a request goes out with what worked last (a bearer token, or Basic);
on ``401`` with ``WWW-Authenticate: Basic`` it is sent again with the credentials; on ``401``
with ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` (Docker's token flow) a
token is asked of ``realm`` (``GET``, the credentials as Basic, or anonymous) and the request
sent again with it. A realm must be ``https``; a registry spoken to in plain ``http`` may
name a plain ``http`` realm on a loopback address, or anywhere with ``insecure``. No
credential or token is ever in a message, a ``repr`` or a log.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
import ssl
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from jaxport import AuthenticationError, OciError
from jaxport.registry._deadline import within
from jaxport.registry._oci_transport import large_read_transport
from jaxport.registry._oci_url import is_loopback

__all__ = [
    "IDENTITY",
    "PASSWORD_ENV",
    "USERNAME_ENV",
    "Credentials",
    "OciAuth",
    "check_identity",
    "find_credentials",
    "parse_challenge",
    "tls_context",
]

USERNAME_ENV = "JAXPORT_OCI_USERNAME"
PASSWORD_ENV = "JAXPORT_OCI_PASSWORD"
#: The headers of every request: the bytes as they are, never gzip-, br- or zstd-encoded.
IDENTITY = {"Accept-Encoding": "identity"}
#: The largest token answer read (bytes).
_TOKEN_LIMIT = 1 << 16
_PARAM = re.compile(r'([A-Za-z_]+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


@dataclass(frozen=True)
class Credentials:
    """A user name and a password (or a personal access token) for one registry.

    Attributes:
        username: the user name.
        password: the secret: never in ``repr`` or ``str``.
        source: where they were found, for messages (``JAXPORT_OCI_USERNAME``, the config's path).
    """

    username: str
    password: str = field(repr=False)
    source: str

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, source={self.source!r})"

    __str__ = __repr__

    def basic(self) -> str:
        """The ``Authorization`` header's value for Basic."""
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


def find_credentials(host: str) -> tuple[Credentials | None, str]:
    """The credentials for ``host`` (``HOST[:PORT]``), and a note for an ``AuthenticationError``
    (``""``, or why none were found where the Docker config names a credential helper).

    Raises:
        OciError: only one of the two variables is set, or the Docker config is not JSON or
            holds an ``auth`` that is not base64 ``user:password``.
    """
    user, password = os.environ.get(USERNAME_ENV), os.environ.get(PASSWORD_ENV)
    if (user is None) != (password is None):
        raise OciError(f"set both {USERNAME_ENV} and {PASSWORD_ENV}, or neither")
    if user is not None and password is not None:
        return Credentials(user, password, USERNAME_ENV), ""
    path = _docker_config_path()
    config = _read_config(path)
    entry = _auths_entry(config.get("auths"), host)
    if entry is not None:
        found = _entry_credentials(entry, str(path))
        if found is not None:
            return found, ""
    return None, _helper_note(config, entry, host, path)


def _docker_config_path() -> Path:
    folder = os.environ.get("DOCKER_CONFIG")
    return Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"


def _read_config(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as e:
        raise OciError(f"cannot read the Docker config {path}: {e.strerror}") from None
    try:
        config = json.loads(text)
    except (ValueError, RecursionError):
        raise OciError(f"the Docker config {path} is not valid JSON") from None
    return config if isinstance(config, dict) else {}


def _config_host(key: str) -> str:
    """An ``auths`` key as ``host[:port]``, e.g. ``index.docker.io``."""
    return (urlsplit(key).netloc if "://" in key else key.split("/", 1)[0]).lower()


def _auths_entry(auths: Any, host: str) -> dict[str, Any] | None:
    if not isinstance(auths, dict):
        return None
    wanted = {host.lower()}
    if host.lower() in ("docker.io", "registry-1.docker.io"):
        wanted.add("index.docker.io")
    for key, entry in auths.items():
        if isinstance(key, str) and _config_host(key) in wanted and isinstance(entry, dict):
            return entry
    return None


def _entry_credentials(entry: dict[str, Any], source: str) -> Credentials | None:
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            user, sep, password = base64.b64decode(auth, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            sep = ""
        if not sep:
            raise OciError(
                f"the Docker config {source} holds an auth that is not base64 user:password"
            )
        return Credentials(user, password, source)
    name, secret = entry.get("username"), entry.get("password")
    if isinstance(name, str) and isinstance(secret, str) and name:
        return Credentials(name, secret, source)
    return None


def _helper_note(
    config: dict[str, Any], entry: dict[str, Any] | None, host: str, path: Path
) -> str:
    helpers = config.get("credHelpers")
    helper = helpers.get(host) if isinstance(helpers, dict) else None
    helper = helper or config.get("credsStore")
    how = f"set {USERNAME_ENV} and {PASSWORD_ENV}"
    if isinstance(helper, str) and helper:
        return (
            f"; the Docker config {path} names the credential helper {helper!r} for it, which "
            f"jaxport does not run: {how}, or put the host's auth in the config's auths"
        )
    if entry is not None and entry.get("identitytoken"):
        return f"; the Docker config {path} holds an identity token for it (not used): {how}"
    return f"; {how}, or log in (the Docker config's auths)"


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every OCI client of this process: httpx's defaults (certifi's CA
    bundle), made once (loading the bundle takes about 30 ms)."""
    return httpx.create_ssl_context()


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """A ``WWW-Authenticate`` header's scheme (lower case) and parameters:
    ``Bearer realm="https://auth",service="reg",scope="repository:a:pull"`` ->
    ``("bearer", {"realm": ..., "service": ..., "scope": ...})``."""
    scheme, _, rest = header.strip().partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _PARAM.finditer(rest)
    }
    return scheme.lower(), params


class OciAuth(httpx.Auth):
    """Anonymous, Basic and bearer-token access to one registry (see the module's doc).

    Args:
        credentials: what ``find_credentials`` found, or None.
        note: the note for an ``AuthenticationError`` (what ``find_credentials`` says).
        insecure: a token realm may be plain ``http`` on any host (unless ``https``).
        https: the registry is spoken to over ``https``: its token realm must be too.
        timeout: seconds a token request may take.
    """

    def __init__(
        self,
        credentials: Credentials | None,
        note: str = "",
        *,
        insecure: bool = False,
        https: bool = False,
        timeout: float = 60.0,
    ):
        self.credentials, self.note, self._insecure = credentials, note, insecure
        self._timeout, self._https = timeout, https
        self._header: str | None = None
        self._tokens = httpx.Client(
            headers=IDENTITY,
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
            transport=large_read_transport(tls_context()),  # a dripped answer broken off
        )

    def __repr__(self) -> str:
        return f"OciAuth({self.credentials!r})"

    def close(self) -> None:
        self._tokens.close()

    def secrets(self) -> Iterable[str]:
        """What no message may contain: the password, the current token."""
        if self.credentials is not None and self.credentials.password:
            yield self.credentials.password
        if self._header is not None:
            yield self._header.partition(" ")[2]

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        sent = self._header
        if sent is not None:
            request.headers["Authorization"] = sent
        response = yield request
        if response.status_code != 401:
            return
        scheme, params = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if scheme == "bearer" and params.get("realm"):
            self._header = "Bearer " + self._token(params)
        elif scheme == "basic" and self.credentials is not None:
            self._header = self.credentials.basic()
        else:
            return
        if self._header == sent:
            return  # sent already, refused: the caller reads the 401
        request.headers["Authorization"] = self._header
        yield request

    def _token(self, params: dict[str, str]) -> str:
        realm = params["realm"]
        parts = urlsplit(realm)
        if parts.scheme != "https" and (
            self._https
            or parts.scheme != "http"
            or not (self._insecure or is_loopback(parts.netloc))
        ):
            raise OciError(
                f"the registry's token realm {parts.scheme}://{parts.netloc} is not https"
            )
        query = {k: params[k] for k in ("service", "scope") if params.get(k)}
        headers = {"Authorization": self.credentials.basic()} if self.credentials else {}
        try:
            with self._tokens.stream("GET", realm, params=query, headers=headers) as answer:
                body = _read_limited(answer, self._timeout)
        except httpx.HTTPError as e:
            raise OciError(
                f"the token realm {parts.netloc} could not be reached: {type(e).__name__}"
            ) from None
        if answer.status_code in (401, 403):
            who = "these credentials" if self.credentials else "anonymous access"
            raise AuthenticationError(
                f"the token realm {parts.netloc} refused {who} "
                f"(HTTP {answer.status_code}){self.note}"
            )
        if answer.status_code != 200:
            raise OciError(f"the token realm {parts.netloc} answered HTTP {answer.status_code}")
        return _token_of(body, parts.netloc)


def check_identity(response: httpx.Response, what: str) -> None:
    """Refuses an answer sent encoded (gzip, br, zstd) although ``IDENTITY`` asked for the
    bytes as they are: httpx would decode it without a limit.

    Raises:
        OciError: its ``Content-Encoding`` is not ``identity``.
    """
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise OciError(
            f"{what}: sent {encoding[:40]!r}-encoded, though jaxport asks for the bytes as "
            "they are (Accept-Encoding: identity)"
        )


def _read_limited(answer: httpx.Response, seconds: float) -> bytes:
    check_identity(answer, "the token realm's answer")
    body = b""
    for chunk in within(answer.iter_raw(), seconds):
        body += chunk
        if len(body) > _TOKEN_LIMIT:
            raise OciError("the token realm's answer is larger than 64 KiB")
    return body


def _token_of(body: bytes, where: str) -> str:
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        answer = None
    token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
    if (
        not isinstance(token, str)
        or not token
        or not token.isascii()
        or any(c.isspace() for c in token)
    ):
        raise OciError(f"the token realm {where} answered no token (JSON with a token field)")
    return token
