"""A registry server's compiled sets as ``CompiledStore``'s three calls (``store``,
``sets_of``, ``read``), so that ``Registry.compile`` and ``use_compiled`` work the same
through a server (``server/_api_compiled.py``). Every blob read is checked against its
sha256 here, and ``registry/_compiled_seed.py`` verifies each set with the caller's own keys:
nothing the server answers is trusted.

A store sends only what the server needs: nothing for a repeat (a set of the same key by the
same signer is listed), else the blobs ``/blobs/missing`` names (as a push's parts,
``registry/_remote_push.py``), then the set: its body lists the files, at most
``MAX_SET_FILES``. A blob is read through the route of the archive whose listed set names it.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn
from urllib.parse import quote

from jaxport import CorruptArchiveError, NotFoundError, RegistryError
from jaxport._files import DEFAULT_MAX_READ
from jaxport.registry._compiled_store import StoredSet
from jaxport.registry._compiled_types import CompiledSet, check_set_files, same_key
from jaxport.registry._download import download
from jaxport.registry._http import Http
from jaxport.registry._wire import from_wire, to_wire

__all__ = ["HttpCompiledStore"]


class HttpCompiledStore:
    """The compiled sets of the versions of ``name`` on a registry server."""

    def __init__(self, http: Http, name: str, lacks: Callable[[str], NoReturn]) -> None:
        self._http = http
        self._lacks = lacks
        self._raw_name = name
        self._name = quote(name, safe="")
        #: Each blob of the sets ``sets_of`` listed -> the archive whose route serves it.
        self._archive_of: dict[str, str] = {}

    def store(
        self, made: CompiledSet, manifest: bytes, bundle: bytes, files: Mapping[str, bytes]
    ) -> CompiledSet:
        """Stores the set on the server: nothing is sent when the server lists a set of the
        same key by the same signer (kept there as it is: ``status == "already stored"``);
        else the blobs it asks for (``POST /blobs/missing``: those it lacks or this token
        does not reach, ``registry/_reach.py``), then the set.

        Raises:
            InvalidNameError: more than ``MAX_SET_FILES`` files (before anything is sent).
            SignatureError: the server found the bundle not signing the set's manifest.
            NotFoundError: the server lacks a blob named (or the archive is not ``name``'s).
            PermissionDeniedError: the token may not write ``name``.
        """
        check_set_files(made)
        kept = self._kept(made)
        if kept is not None:
            return kept
        blobs = {hashlib.sha256(manifest).hexdigest(): manifest}
        blobs[hashlib.sha256(bundle).hexdigest()] = bundle
        blobs.update({f.sha256: files[f.name] for f in made.files})
        self._upload(blobs)
        body = {
            "set": to_wire(dataclasses.replace(made, status="", reason="")),
            "manifest_digest": hashlib.sha256(manifest).hexdigest(),
            "bundle_digest": hashlib.sha256(bundle).hexdigest(),
        }
        answer = self._json("POST", f"/compiled/{self._name}", json=body)
        return from_wire(CompiledSet, answer, source="a compiled set")  # type: ignore[no-any-return]

    def _kept(self, made: CompiledSet) -> CompiledSet | None:
        """The server's set of ``made``'s key by ``made``'s signer, as ``CompiledStore.store``
        answers a repeat (its row, unverified: nothing is used from it)."""
        for s in self.sets_of(made.digest):
            if same_key(s.made, made) and s.made.signer == made.signer:
                return dataclasses.replace(
                    s.made, status="already stored", reason="kept the stored set"
                )
        return None

    def _upload(self, blobs: Mapping[str, bytes]) -> None:
        """PUTs the ``blobs`` (digest -> bytes) the server asks for."""
        body = {"digests": list(blobs), "name": self._raw_name}
        wanted = self._http.json("POST", "/blobs/missing", json=body)["missing"]
        for digest in dict.fromkeys(wanted):
            if digest in blobs:
                params = {"name": self._raw_name}
                self._http.json("PUT", f"/blobs/{digest}", content=blobs[digest], params=params)

    def sets_of(self, digest: str) -> builtins.list[StoredSet]:
        """The sets of the archive ``digest``, as the server says (unverified); ``read`` then
        reads their blobs (whatever other archive's sets are listed later).

        Raises:
            CorruptArchiveError: the answer is not a list of sets.
        """
        answer = self._json("GET", f"/compiled/{self._name}/{quote(digest, safe='')}")
        try:
            stored = [
                StoredSet(from_wire(CompiledSet, a["set"], source="a compiled set"),
                          str(a["bundle_digest"]))
                for a in answer
            ]  # fmt: skip
        except (TypeError, KeyError):  # not a list of {"set", "bundle_digest"}
            raise CorruptArchiveError("a registry server's compiled sets are not a list of "
                                      "sets") from None  # fmt: skip
        for s in stored:
            named = (s.made.manifest_digest, s.bundle_digest, *(f.sha256 for f in s.made.files))
            self._archive_of.update(dict.fromkeys(named, digest))
        return stored

    def read(self, digest: str, max_size: int | None = None) -> bytes:
        """A blob of a set ``sets_of`` listed, checked against ``digest``; ``max_size``: the
        most bytes it may have (a longer body is refused; None: ``DEFAULT_MAX_READ``).

        Raises:
            NotFoundError: no set listed so far names the blob (or the server has it no more).
            IntegrityError: the bytes served are not ``digest``'s, or over ``max_size``.
        """
        archive = self._archive_of.get(digest)
        if archive is None:
            raise NotFoundError(f"no compiled set listed here names the blob {digest[:12]}")
        where = f"/compiled/{self._name}/{quote(archive, safe='')}"
        path = f"{where}/blobs/{quote(digest, safe='')}"
        return download(
            self._http, path, digest, DEFAULT_MAX_READ if max_size is None else max_size
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._http.json(method, path, **kwargs)
        except RegistryError as e:
            if type(e) is RegistryError:  # 404 or 405 of a server without the routes
                self._lacks("compiled executables (this server is older than their routes)")
            raise
