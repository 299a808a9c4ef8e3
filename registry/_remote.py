"""``jaxport.Registry("https://host:port", token=...)``: the registry server's client.

The same methods, results and typed errors as a direct registry (``Registry``), over HTTP
(``registry/_http.py``: retries, errors). Pushes send only the parts the server lacks
(``registry/_uploads.py``: a model archive's skeleton and tensors, a function archive whole),
then commit the version; every download is checked against its sha256 here as well, so a
corrupt or truncated answer is never returned. What needs the database or the blob store
itself (signing, the audit queue, audits in another environment, upgrade reports) raises
``UnsupportedFeatureError`` naming the direct registry as the way to do it.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from jaxport import (
    IntegrityError,
    InvalidNameError,
    NotFoundError,
    UnsupportedFeatureError,
    WrongKindError,
)
from jaxport._files import DEFAULT_MAX_READ
from jaxport.registry._config import TOKEN_ENV, RegistryConfig, is_server_url, safe_url
from jaxport.registry._download import download
from jaxport.registry._events import Event
from jaxport.registry._http import Http
from jaxport.registry._names import check_name, check_version
from jaxport.registry._registry import _LOCAL, Registry, _platform
from jaxport.registry._remote_push import archive_parts, default_name, examples_blob
from jaxport.registry._signatures import Signature
from jaxport.registry._tokens import NewToken, TokenInfo
from jaxport.registry._types import (
    AliasMove,
    GcReport,
    PushResult,
    Ref,
    Resolution,
    VariantInfo,
    VerifyReport,
)
from jaxport.registry._wire import from_wire, to_wire

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.audit import Change, Finding
    from jaxport.export import Model

__all__ = ["TOKEN_ENV", "RemoteRegistry", "RemoteTokens", "is_server_url"]


class RemoteTokens:
    """``Registry.tokens`` of a server (scope ``admin``): create, list, revoke."""

    def __init__(self, http: Http):
        self._http = http

    def create(
        self, name: str, scope: str = "read", *, prefixes: Sequence[str] = (),
        expires_in: float | None = None,
    ) -> NewToken:  # fmt: skip
        """As ``Tokens.create``; the secret is in the answer and nowhere else."""
        body = {"name": name, "scope": scope, "prefixes": list(prefixes), "expires_in": expires_in}
        data = self._http.json("POST", "/tokens", json=body)
        return NewToken(from_wire(TokenInfo, data["info"]), str(data["secret"]))

    def list(self) -> builtins.list[TokenInfo]:
        """As ``Tokens.list``."""
        return from_wire(builtins.list[TokenInfo], self._http.json("GET", "/tokens"))  # type: ignore[no-any-return]

    def revoke(self, name: str) -> TokenInfo:
        """As ``Tokens.revoke``."""
        return from_wire(TokenInfo, self._http.json("DELETE", f"/tokens/{_seg(name)}"))  # type: ignore[no-any-return]


class RemoteRegistry(Registry):
    """A registry server's client; made by ``Registry(url)`` for an ``http(s)://`` URL.

    Args:
        url: the server's address, e.g. ``https://registry.example.com:8000``.
        token: a bearer token (``jaxport token create``); default ``$JAXPORT_TOKEN``.
        timeout: seconds one request may wait for the server (uploads and audits included).

    Raises:
        InvalidNameError: ``blobs`` or ``upgrade`` given (the server holds the blob store
            and its schema).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        blobs: Any = None,
        upgrade: bool = False,
        require_signatures: Any = None,
        token: str | None = None,
        timeout: float = 300.0,
    ):
        if blobs is not None or upgrade or require_signatures is not None:
            raise InvalidNameError(
                "a registry server holds its own blob store, schema and signature policy: "
                "give it only a URL and a token"
            )
        url = url or RegistryConfig.from_env().url
        if not is_server_url(url):  # Registry() routes here only for one
            raise InvalidNameError("a registry server's URL starts with http:// or https://")
        assert url is not None  # for mypy: is_server_url checked it
        self.require_signatures = None
        self._http = Http(url, token if token is not None else os.environ.get(TOKEN_ENV) or None)
        self.url = safe_url(url.rstrip("/"))
        self.blobs = None  # type: ignore[assignment]
        #: The server's tokens (scope ``admin``).
        self.tokens = RemoteTokens(self._http)  # type: ignore[assignment]

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"Registry({self.url!r})"

    def _get(self, kind: Any, path: str, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        return from_wire(kind, self._http.json("GET", path, params=query))

    # -- reading ------------------------------------------------------------------------------

    def names(self) -> builtins.list[str]:
        return builtins.list(self._http.json("GET", "/names")["names"])

    def get(self, reference: str) -> Ref:
        return self._get(Ref, "/ref", reference=reference)  # type: ignore[no-any-return]

    def list(
        self, name: str | None = None, *, limit: int = 100, after: tuple[str, int] | None = None
    ) -> builtins.list[Ref]:
        after_name, after_version = after if after is not None else (None, None)
        return self._get(  # type: ignore[no-any-return]
            builtins.list[Ref], "/versions", name=name, limit=limit, after_name=after_name,
            after_version=after_version,
        )  # fmt: skip

    def search(self, **filters: Any) -> builtins.list[VariantInfo]:
        return self._get(builtins.list[VariantInfo], "/search", **filters)  # type: ignore[no-any-return]

    def resolve(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> Resolution:
        if version is not None:
            reference = f"{check_name(reference)}:{check_version(version)}"
        if platform is _LOCAL and isinstance(reference, str) and reference.startswith("sha256:"):
            platform = None
        return self._get(  # type: ignore[no-any-return]
            Resolution, "/resolve", reference=reference, platform=_platform(platform),
            nr_devices=nr_devices,
        )  # fmt: skip

    def aliases(self, name: str) -> dict[str, int]:
        return dict(self._http.json("GET", f"/aliases/{_seg(name)}"))

    def alias_history(self, name: str, alias: str | None = None) -> builtins.list[AliasMove]:
        return self._get(builtins.list[AliasMove], f"/aliases/{_seg(name)}/history", alias=alias)  # type: ignore[no-any-return]

    def audit_results(self, **filters: Any) -> builtins.list[Finding]:
        from jaxport.audit import Finding

        return self._get(builtins.list[Finding], "/findings", **filters)  # type: ignore[no-any-return]

    def diff(self, a: str, b: str) -> builtins.list[Change]:
        from jaxport.audit import Change

        return self._get(builtins.list[Change], "/diff", a=a, b=b)  # type: ignore[no-any-return]

    def signatures(self, reference: str) -> builtins.list[Signature]:
        return self._get(builtins.list[Signature], "/signatures", reference=reference)  # type: ignore[no-any-return]

    def events(
        self, *, name: str | None = None, limit: int = 100, before: int | None = None
    ) -> builtins.list[Event]:
        return self._get(builtins.list[Event], "/events", name=name, limit=limit, before=before)  # type: ignore[no-any-return]

    # -- pulling ------------------------------------------------------------------------------

    def read_blob(self, digest: str) -> bytes:
        """The blob (or model archive) ``digest``, checked against it here (at most
        ``DEFAULT_MAX_READ`` bytes).

        Raises:
            IntegrityError: the bytes received do not match ``digest``.
            NotFoundError: the server has no such blob.
            ServerUnavailableError: the server cannot be reached.
        """
        return download(self._http, f"/blobs/{_seg(digest)}", digest, DEFAULT_MAX_READ)

    def _read_range(self, digest: str) -> Callable[[int, int], bytes]:
        def read(start: int, end: int) -> bytes:
            with self._http.stream(
                f"/blobs/{_seg(digest)}", headers={"Range": f"bytes={start}-{end - 1}"}
            ) as r:
                data = r.read()
            if r.status_code != 206 or len(data) != end - start:
                raise IntegrityError(
                    f"blob {digest}: the server sent another range", expected=digest
                )
            return data

        return read

    def _read_variant(self, chosen: VariantInfo) -> bytes:
        """The variant's archive: a server that would send more than its recorded size is
        refused before a byte is read."""
        return download(
            self._http, f"/blobs/{_seg(chosen.digest)}", chosen.digest, chosen.size_bytes
        )

    def pull_bytes(
        self, reference: str, *, version: int | None = None, platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> bytes:  # fmt: skip
        chosen = self._chosen(reference, version, platform, nr_devices)
        return self._read_variant(chosen)

    def pull_file(
        self, reference: str, path: str | os.PathLike[str], *, version: int | None = None,
        platform: Any = _LOCAL, nr_devices: int | None = None,
    ) -> VariantInfo:  # fmt: skip
        from jaxport._io import atomic_write

        chosen = self._chosen(reference, version, platform, nr_devices)
        atomic_write(path, [self._read_variant(chosen)])
        return chosen

    def pull(
        self, reference: str, *, version: int | None = None, platform: Any = _LOCAL,
        nr_devices: int | None = None, allow_custom_calls: Sequence[str] = (),
        method: str | None = None,
    ) -> Exported:  # fmt: skip
        from jaxport.export import loads, loads_model

        chosen = self._chosen(reference, version, platform, nr_devices)
        data = self._read_variant(chosen)
        allow = tuple(allow_custom_calls)
        if chosen.kind == "model":
            if method is None:
                raise WrongKindError(
                    f"{chosen.name}:{chosen.version} is a model: use pull_model, or name a "
                    "method", found="model",
                )  # fmt: skip
            model = loads_model(data, allow_custom_calls=allow)
            if method not in model.exported:
                raise NotFoundError(
                    f"{chosen.name}:{chosen.version} has no method {method!r}; it has "
                    f"{sorted(model.exported)}"
                )
            return model.exported[method]
        if method is not None:
            raise WrongKindError(
                f"{chosen.name}:{chosen.version} is a function: it has no methods",
                found="function",
            )
        return loads(data, allow_custom_calls=allow)

    def pull_model(
        self, reference: str, *, version: int | None = None, platform: Any = _LOCAL,
        nr_devices: int | None = None, allow_custom_calls: Sequence[str] = (),
    ) -> Model:  # fmt: skip
        from jaxport.export import loads_model

        chosen = self._chosen(reference, version, platform, nr_devices)
        if chosen.kind != "model":
            raise WrongKindError(
                f"{chosen.name}:{chosen.version} is a function: use pull", found="function"
            )
        return loads_model(self._read_variant(chosen), allow_custom_calls=allow_custom_calls)

    # -- writing ------------------------------------------------------------------------------

    def push(
        self,
        source: Any,
        name: str | None = None,
        *,
        vjp_order: int = 0,
        aliases: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
        examples: Any = None,
        max_size: int = DEFAULT_MAX_READ,
        allow_custom_calls: Sequence[str] = (),
        tolerance: Any = None,
    ) -> PushResult:
        """``Registry.push`` through the server: the archives are made here, split into parts,
        only the parts the server lacks are sent, then the version is committed (validated on
        the server, in its sandbox).

        Golden examples are made here (outputs not given computed by a source that runs
        here), sent as one more part and stored as a direct push stores them.

        Raises:
            (as ``Registry.push``; ``PermissionDeniedError`` for a token without ``write`` or
            outside its name prefixes)
        """
        sources = builtins.list(source) if isinstance(source, builtins.list | tuple) else [source]
        archives = [archive_parts(s, vjp_order=vjp_order, max_size=max_size) for s in sources]
        if name is None:
            name = default_name(archives[0])
        if tolerance is not None and not examples:
            raise InvalidNameError("a tolerance applies to golden examples: pass examples too")
        golden = examples_blob(sources, archives, examples, tolerance) if examples else None
        extra = {golden[0]: golden[1]} if golden else {}
        body = {
            "name": name, "archives": [to_wire(a.parts) for a in archives],
            "aliases": builtins.list(aliases), "metadata": dict(metadata or {}),
            "allow_custom_calls": builtins.list(allow_custom_calls), "vjp_order": vjp_order,
            "examples": {"digest": golden[0], "kind": golden[2]} if golden else None,
        }  # fmt: skip
        sent: list[int] = []  # the size of each part sent
        try:
            self._upload(archives, extra, name, sent)
            answer = self._http.json("POST", "/versions", json=body)
        except BaseException as error:  # Ctrl-C included: say what stays on the server
            if sent:
                error.add_note(_left_behind(self.url, sent))
            raise
        return from_wire(PushResult, answer)  # type: ignore[no-any-return]

    def _upload(
        self, archives: Sequence[Any], extra: Mapping[str, bytes], name: str | None,
        sent: builtins.list[int],
    ) -> None:  # fmt: skip
        """Sends the parts of ``archives`` and the ``extra`` blobs (digest -> bytes) that the
        server asks for, each with the push's ``name``: a name the token may not push to is
        refused before any part is sent. ``sent`` gets the size of each part sent."""
        digests = [p.digest for a in archives for p in a.parts.parts] + builtins.list(extra)
        body = {"digests": digests, "name": name}
        missing = set(self._http.json("POST", "/blobs/missing", json=body)["missing"])
        params = {"name": name} if name is not None else None
        for a in archives:
            for p in a.parts.parts:
                if p.digest in missing:
                    data = bytes(a.chunks.view(p.offset, p.end))
                    self._http.json("PUT", f"/blobs/{p.digest}", content=data, params=params)
                    sent.append(len(data))
                    missing.discard(p.digest)
        for digest, data in extra.items():
            if digest in missing:
                self._http.json("PUT", f"/blobs/{digest}", content=data, params=params)
                sent.append(len(data))

    def alias(self, name: str, alias: str, version: int | None) -> None:
        self._http.json("PUT", f"/aliases/{_seg(name)}/{_seg(alias)}", json={"version": version})

    def delete(self, name: str, version: int | None = None, *, force: bool = False) -> None:
        params: dict[str, Any] = {"force": bool(force)}
        if version is not None:
            params["version"] = version
        self._http.json("DELETE", f"/names/{_seg(name)}", params=params)

    def gc(
        self, *, dry_run: bool = False, min_age: float = 3600.0, temp_age: float = 3600.0
    ) -> GcReport:
        body = {"dry_run": dry_run, "min_age": min_age, "temp_age": temp_age}
        return from_wire(GcReport, self._http.json("POST", "/gc", json=body))  # type: ignore[no-any-return]

    def verify(self, *, deep: bool = False, timeout: float = 120.0) -> VerifyReport:
        body = {"deep": deep, "timeout": timeout}
        return from_wire(VerifyReport, self._http.json("POST", "/verify", json=body))  # type: ignore[no-any-return]

    def audit(
        self,
        reference: str | None = None,
        *,
        platform: str | None = None,
        store: bool = True,
        python: Any = None,
        timeout: float = 120.0,
        force: bool = False,
        level: str = "full",
        workers: int = 1,
        jax: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        tolerance: Any = None,
    ) -> builtins.list[Finding]:
        """``Registry.audit`` run by the server (with its jax), findings recorded there.

        Raises:
            UnsupportedFeatureError: ``python``, ``jax``, ``tolerance`` or ``store=False``
                (audit with a direct registry for those).
        """
        if tolerance is not None:
            raise UnsupportedFeatureError(
                "an audit tolerance is not sent to a registry server: audit with a direct "
                "registry, or push the examples with push(..., tolerance=...)"
            )
        from jaxport.audit import Finding

        if python is not None or jax is not None or not store:
            _direct_only("audits with another jax, or without recording the findings,")
        body = {"reference": reference, "platform": platform, "force": force, "level": level,
                "timeout": timeout}  # fmt: skip
        found = from_wire(builtins.list[Finding], self._http.json("POST", "/audits", json=body))
        if progress is not None:
            progress(len(found), len(found))
        return found  # type: ignore[no-any-return]

    # -- what needs the database or the blob store itself ---------------------------------

    def sign(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("signing")

    def verify_signatures(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("signature verification of stored versions")

    def windows(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("jax window reports")

    def upgrade_report(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("upgrade reports")

    def enqueue_audits(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("the audit queue")

    def check_audit_queue(self) -> NoReturn:
        _direct_only("the audit queue")

    def run_audit_worker(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("audit workers")

    def missing_blobs(self, digests: Sequence[str]) -> builtins.list[str]:
        return builtins.list(
            self._http.json("POST", "/blobs/missing", json={"digests": builtins.list(digests)})[
                "missing"
            ]
        )

    def receive_blob(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("receive_blob (push uploads its parts itself)")

    def push_parts(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("push_parts (push uploads its parts itself)")

    def blob_stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        _direct_only("blob_stream (use read_blob or pull_file)")

    def _check_writable(self) -> None:
        return None


def _left_behind(url: str, sent: Sequence[int]) -> str:
    """What a push that stopped after sending parts left on the server, and how to free it."""
    return (
        f"this push had sent {len(sent)} part(s), {sum(sent):,} bytes, to {url}: they stay "
        "there, referenced by no version, for gc's --min-age (an hour by default), so pushing "
        "the same archives again within it sends them no more; an admin frees them now with "
        "`jaxport gc --min-age 0`"
    )


def _direct_only(what: str) -> NoReturn:
    raise UnsupportedFeatureError(
        f"{what} need the registry's database: use a direct registry (its database URL), "
        "not a registry server"
    )


def _seg(text: str) -> str:
    """``text`` as one URL path segment."""
    from urllib.parse import quote

    return quote(str(text), safe="")
