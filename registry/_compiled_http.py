"""A registry server's compiled sets as ``CompiledStore``'s three calls (``store``,
``sets_of``, ``read``), so that ``Registry.compile`` and ``use_compiled`` work the same
through a server (``server/_api_compiled.py``). Every blob read is checked against its
sha256 here, and ``registry/_compiled_seed.py`` verifies each set with the caller's own keys:
nothing the server answers is trusted.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn
from urllib.parse import quote

from jaxport import RegistryError
from jaxport._files import DEFAULT_MAX_READ
from jaxport.registry._compiled_store import StoredSet
from jaxport.registry._compiled_types import CompiledSet
from jaxport.registry._download import download
from jaxport.registry._http import Http
from jaxport.registry._wire import from_wire, to_wire

__all__ = ["HttpCompiledStore"]


class HttpCompiledStore:
    """The compiled sets of the versions of ``name`` on a registry server."""

    def __init__(self, http: Http, name: str, lacks: Callable[[str], NoReturn]) -> None:
        self._http = http
        self._lacks = lacks
        self._name = quote(name, safe="")
        self._query = {"name": name}
        self._digest = ""

    def store(
        self, made: CompiledSet, manifest: bytes, bundle: bytes, files: Mapping[str, bytes]
    ) -> CompiledSet:
        """Uploads the set's blobs the server lacks, then stores the set."""
        blobs = {hashlib.sha256(manifest).hexdigest(): manifest}
        blobs[hashlib.sha256(bundle).hexdigest()] = bundle
        blobs.update({f.sha256: files[f.name] for f in made.files})
        for digest, data in blobs.items():  # uploaded each time: a prefix token's reach
            self._http.json("PUT", f"/blobs/{digest}", content=data, params=self._query)
        body = {
            "set": to_wire(dataclasses.replace(made, status="", reason="")),
            "manifest_digest": hashlib.sha256(manifest).hexdigest(),
            "bundle_digest": hashlib.sha256(bundle).hexdigest(),
        }
        answer = self._json("POST", f"/compiled/{self._name}", json=body)
        return from_wire(CompiledSet, answer, source="a compiled set")  # type: ignore[no-any-return]

    def sets_of(self, digest: str) -> builtins.list[StoredSet]:
        """The sets of the archive ``digest``, as the server says (unverified)."""
        self._digest = digest
        answer = self._json("GET", f"/compiled/{self._name}/{quote(digest, safe='')}")
        return [
            StoredSet(from_wire(CompiledSet, a["set"], source="a compiled set"),
                      str(a["bundle_digest"]))
            for a in answer
        ]  # fmt: skip

    def read(self, digest: str) -> bytes:
        """A blob of the sets of the latest ``sets_of`` archive, checked against ``digest``."""
        where = f"/compiled/{self._name}/{quote(self._digest, safe='')}"
        path = f"{where}/blobs/{quote(digest, safe='')}"
        return download(self._http, path, digest, DEFAULT_MAX_READ)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._http.json(method, path, **kwargs)
        except RegistryError as e:
            if type(e) is RegistryError:  # 404 or 405 of a server without the routes
                self._lacks("compiled executables (this server is older than their routes)")
            raise
