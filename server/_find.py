"""The search page's data: the versions a token may see that match a query.

A query (``/search``; the box on every page sends ``q``) has four kinds of terms; a version
matches when it matches all of them:

=====================  ======================================================================
``WORD``               a name containing ``WORD`` (any case)
``KEY=VALUE``          push metadata ``KEY`` equal to ``VALUE``; ``KEY=`` : having ``KEY``
``platform:P``         a variant that runs on ``P`` (``Registry.search(platform=...)``)
``jax:V``              a variant exported by jax ``V`` or a release under it (``jax:0.10``)
=====================  ======================================================================

``q`` may hold them all (``vision owner=ml platform:tpu jax:0.10``); the search page's form
also sends them as fields of their own (``meta``, ``platform``, ``jax``). Platforms and jax
releases are matched by ``Registry.search`` (its rules: any case, ``gpu`` the server's GPU
kind, release prefixes on dots), names and metadata here, on ``Registry.list``'s versions.
At most ``MAX_RESULTS`` versions are shown, names in order and each name's newest first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from jaxport import InvalidNameError
from jaxport.registry import DESCRIPTION_KEY, Ref, Registry, TokenInfo, VariantInfo
from jaxport.server._markdown import summary

__all__ = ["MAX_RESULTS", "Query", "Result", "find"]

#: The most versions one search shows.
MAX_RESULTS = 200
#: Rows read from the registry per query (``Registry.search`` and ``Registry.list`` pages).
_CHUNK = 1_000
#: The longest query kept (characters).
MAX_QUERY = 500


@dataclasses.dataclass(frozen=True)
class Query:
    """A parsed query: name words, metadata terms (``(key, None)``: has the key), a platform
    and a jax release prefix (None: any)."""

    words: tuple[str, ...] = ()
    meta: tuple[tuple[str, str | None], ...] = ()
    platform: str | None = None
    jax: str | None = None

    @classmethod
    def parse(cls, q: str, meta: Sequence[str] = (), platform: str = "", jax: str = "") -> Query:
        """The query of the search form: ``q`` (this module's terms) and the fields of their
        own, which win over the same term in ``q``.

        Raises:
            InvalidNameError: a query longer than ``MAX_QUERY`` characters, or a metadata term
                without a key.
        """
        if len(q) + sum(map(len, meta)) > MAX_QUERY:
            raise InvalidNameError(f"a query is at most {MAX_QUERY} characters")
        words: list[str] = []
        terms: list[tuple[str, str | None]] = []
        for term in [*q.split(), *(m.strip() for m in meta if m.strip())]:
            key, sep, value = term.partition("=")
            head, colon, rest = term.partition(":")
            if sep:
                if not key:
                    raise InvalidNameError(f"a metadata term is KEY=VALUE, got {term!r:.60}")
                terms.append((key, value or None))
            elif colon and head.lower() == "platform":
                platform = platform or rest
            elif colon and head.lower() == "jax":
                jax = jax or rest
            else:
                words.append(term.lower())
        return cls(tuple(words), tuple(terms), platform.strip() or None, jax.strip() or None)

    @property
    def text(self) -> str:
        """The name words and metadata terms as ``q`` (the form shows the rest apart)."""
        meta = [f"{k}={v or ''}" for k, v in self.meta]
        return " ".join([*self.words, *meta])

    @property
    def empty(self) -> bool:
        return not (self.words or self.meta or self.platform or self.jax)


@dataclasses.dataclass(frozen=True)
class Result:
    """A version that matched: the variants that did (all of them when neither a platform nor
    a jax release was asked), the metadata terms' values and its description's first lines."""

    ref: Ref
    variants: tuple[VariantInfo, ...]
    summary: str

    @property
    def platforms(self) -> list[str]:
        return sorted({p for v in self.variants for p in v.platforms})

    @property
    def jax_versions(self) -> list[str]:
        return sorted({v.jax_version for v in self.variants})


def find(reg: Registry, principal: TokenInfo, query: Query) -> tuple[list[Result], bool]:
    """The versions ``principal`` may see that match ``query`` (module doc), and whether there
    were more than ``MAX_RESULTS``.

    Raises:
        InvalidNameError: a platform or jax release ``Registry.search`` refuses.
    """
    names = [
        n for n in reg.names()
        if principal.allows_name(n) and all(w in n.lower() for w in query.words)
    ]  # fmt: skip
    hits = _variant_hits(reg, names, query) if query.platform or query.jax else None
    results: list[Result] = []
    for name in names:
        if hits is not None and not any(key[0] == name for key in hits):
            continue
        for ref in _newest_first(reg, name):
            if not _meta_matches(ref.metadata, query.meta):
                continue
            variants = ref.variants if hits is None else hits.get((name, ref.version))
            if not variants:
                continue
            text = summary(ref.metadata.get(DESCRIPTION_KEY, ""))
            results.append(Result(ref, tuple(variants), text))
            if len(results) > MAX_RESULTS:
                return results[:MAX_RESULTS], True
    return results, False


def _meta_matches(metadata: dict[str, str], terms: Sequence[tuple[str, str | None]]) -> bool:
    return all(
        key in metadata and (value is None or metadata[key] == value) for key, value in terms
    )


def _variant_hits(
    reg: Registry, names: list[str], query: Query
) -> dict[tuple[str, int], list[VariantInfo]]:
    """The variants of ``names`` on ``query``'s platform and jax release, by version:
    ``Registry.search`` by name when there are few names, else over every name."""
    wanted = set(names)
    few = len(names) <= 20
    hits: dict[tuple[str, int], list[VariantInfo]] = {}
    for name in names if few else [None]:
        for v in _search(reg, name, query):
            if v.name in wanted:
                hits.setdefault((v.name, v.version), []).append(v)
    return hits


def _search(reg: Registry, name: str | None, query: Query) -> Iterator[VariantInfo]:
    after = None
    while True:
        page = reg.search(
            name=name, platform=query.platform, jax_version=query.jax, limit=_CHUNK, after=after
        )
        yield from page
        if len(page) < _CHUNK:
            return
        after = page[-1].variant_id


def _newest_first(reg: Registry, name: str) -> list[Ref]:
    refs: list[Ref] = []
    while True:
        after = (name, refs[-1].version) if refs else None
        page = reg.list(name, limit=_CHUNK, after=after)
        refs += page
        if len(page) < _CHUNK:
            return list(reversed(refs))
