"""Lineage and provenance of versions (issue 26 §5): what a version derives from, and where and
by whom it was pushed, as typed columns of ``versions`` (revision 0015).

A version may name one source version (``derived_from_id``) and how it derives from it
(``derivation``, one of ``DERIVATIONS``):

- ``update_params``: a ``jaxport.Model`` made by ``Model.update_params`` from a model pulled
  from the same registry (``Registry.pull_model`` remembers ``NAME:VERSION``);
- ``rescue``: re-exported by ``jaxport rescue`` (it passes ``derived_from=``);
- ``examples``: the same archives, in the same order, as an earlier version of the name, with
  other golden examples (found at push, when the push has examples);
- ``explicit``: ``Registry.push(..., derived_from=...)`` without a ``derivation``.

A source is an existing version when the push commits, so every edge points to an older
version and lineage has no cycle; edges are never changed afterwards. A source deleted later
reads as deleted: its name and version from the child's push event where the row is gone.

Provenance is captured on the client at push (``capture``), where available (None where not):
the git commit of the working tree (``-dirty`` appended when tracked files changed), the
exporting function's name (``Exported.fun_name``, a model's methods' functions), the client's
jax and jaxlib, its host and user. A registry server stores what its client reported
(``reported_provenance``), checked and bounded by ``check_provenance``; its event log names
the token as the actor besides.

Reading lineage is ``registry/_lineage_read.py``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import getpass
import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from jaxport import InvalidNameError, NotFoundError

__all__ = [
    "DERIVATIONS",
    "LIMITS",
    "Lineage",
    "LineageInput",
    "LineageNode",
    "Provenance",
    "capture",
    "check_derivation",
    "check_provenance",
    "lineage_body",
    "reported_provenance",
    "source_of",
]

#: How a version derives from its source.
DERIVATIONS = ("update_params", "rescue", "examples", "explicit")

#: The longest value of each provenance field, in characters (the columns' lengths).
LIMITS = {
    "git_commit": 64,
    "function_qualname": 1000,
    "jax_version": 40,
    "jaxlib_version": 40,
    "host": 255,
    "user": 200,
}

#: Seconds ``git`` may take to answer, each call.
GIT_TIMEOUT = 2.0
_DIRTY = "-dirty"
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where a version was pushed from, as its pushing client reported it (None: unknown).

    Attributes:
        git_commit: the commit checked out in the client's working directory, with
            ``-dirty`` appended when tracked files had changes (a 64-hex commit is then cut
            to 58 hex digits, still a unique prefix); None outside a git work tree or without
            git.
        function_qualname: the exporting function's name (``Exported.fun_name``; a model's
            methods', comma-separated, each ``method=fun_name`` where the two differ); None
            for pushed archive bytes or files (their functions' names are on the variants).
        jax_version, jaxlib_version: the client's installed jax and jaxlib (None: not
            installed, a thin client pushing files).
        host: the client's host name.
        user: the client's user name (through a registry server the event log's actor is the
            token's name besides).
    """

    git_commit: str | None = None
    function_qualname: str | None = None
    jax_version: str | None = None
    jaxlib_version: str | None = None
    host: str | None = None
    user: str | None = None

    def as_columns(self) -> dict[str, str | None]:
        """The ``versions`` columns this provenance fills."""
        return {
            "git_commit": self.git_commit,
            "function_qualname": self.function_qualname,
            "pushed_jax_version": self.jax_version,
            "pushed_jaxlib_version": self.jaxlib_version,
            "pushed_host": self.host,
            "pushed_by": self.user,
        }


@dataclasses.dataclass(frozen=True)
class LineageInput:
    """What a push records: its source ``(name, version)`` and derivation (both None: none),
    and its provenance: ``captured``, or what calling it gives (``capture``: git answers in a
    thread while the push makes its archives)."""

    derived_from: tuple[str, int] | None = None
    derivation: str | None = None
    captured: Provenance | Callable[[], Provenance] = Provenance()

    @property
    def provenance(self) -> Provenance:
        """The provenance (waits for ``capture``'s git, at most ``GIT_TIMEOUT`` seconds)."""
        captured = self.captured
        return captured if isinstance(captured, Provenance) else captured()


LIVE, DELETED, HIDDEN = "live", "deleted", "hidden"


@dataclasses.dataclass(frozen=True)
class LineageNode:
    """A version in a lineage.

    Attributes:
        name, version: the version (None where it is hidden, or deleted without a record of
            what it was).
        state: ``"live"``, ``"deleted"`` (deleted, or soft-deleted by retention) or
            ``"hidden"`` (outside a prefix-limited token's names).
        derivation: how this version derives from its source (None: it has none recorded).
        created_at: unix seconds (None where unknown).
        children: the versions derived from this one (descendants only).
    """

    name: str | None
    version: int | None
    state: str = LIVE
    derivation: str | None = None
    created_at: float | None = None
    children: tuple[LineageNode, ...] = ()

    def __str__(self) -> str:
        if self.name is None:
            return "(a version outside this token's names)" if self.state == HIDDEN else "(deleted)"
        return f"{self.name}:{self.version}"


@dataclasses.dataclass(frozen=True)
class Lineage:
    """A version's lineage and provenance (``Registry.lineage``).

    Attributes:
        name, version: the version.
        derivation: how it derives from ``ancestors[0]`` (None: no source recorded).
        provenance: where and by whom it was pushed (``Provenance``).
        actor: who the registry recorded as pushing it (its push event's actor: a token's
            name through a registry server, else ``local:USER``); None where no event is left.
        ancestors: its source first, then the source's source, ...; their ``children`` empty.
        descendants: the versions derived from it, each with its own ``children``.
        truncated: True where versions were left out: beyond the ``depth`` asked, or over
            ``_lineage_store.MAX_NODES`` (1,000) in all.
    """

    name: str
    version: int
    derivation: str | None
    provenance: Provenance
    actor: str | None
    ancestors: tuple[LineageNode, ...]
    descendants: tuple[LineageNode, ...]
    truncated: bool = False

    @property
    def derived_from(self) -> LineageNode | None:
        """The source version (None: none recorded)."""
        return self.ancestors[0] if self.ancestors else None


# -- checks -----------------------------------------------------------------------------------


def check_derivation(
    derived_from: Any, derivation: Any
) -> tuple[tuple[str, int] | None, str | None]:
    """``push``'s ``derived_from`` and ``derivation`` checked: ``(source, derivation)``.

    Args:
        derived_from: ``"NAME:VERSION"``, a ``Ref`` (a ``PushResult`` too) or None.
        derivation: one of ``DERIVATIONS``; None: ``"explicit"`` where a source is given.

    Raises:
        InvalidNameError: a source that is not ``NAME:VERSION`` or a ``Ref``, a derivation
            not in ``DERIVATIONS``, or a derivation without a source.
    """
    from jaxport.registry._names import check_name, check_version, parse_reference
    from jaxport.registry._types import Ref

    if derivation is not None and derivation not in DERIVATIONS:
        raise InvalidNameError(
            f"derivation must be one of {', '.join(DERIVATIONS)}, got {derivation!r:.60}"
        )
    if derived_from is None:
        if derivation is not None:
            raise InvalidNameError("a derivation needs its source: pass derived_from too")
        return None, None
    if isinstance(derived_from, Ref):
        source = (check_name(derived_from.name), check_version(derived_from.version))
    elif isinstance(derived_from, str):
        parsed = parse_reference(derived_from)
        if parsed.name is None or parsed.version is None:
            raise InvalidNameError(
                f"derived_from must be NAME:VERSION or a Ref, got {derived_from!r:.90}"
            )
        source = (parsed.name, parsed.version)
    else:
        raise InvalidNameError(
            f"derived_from must be NAME:VERSION or a Ref, got {type(derived_from).__name__}"
        )
    return source, derivation or "explicit"


def check_provenance(fields: Mapping[str, Any]) -> Provenance:
    """A ``Provenance`` from reported ``fields`` (a server's client's), each a string within
    ``LIMITS`` without control characters, or None; ``git_commit`` hex (``-dirty`` allowed).

    Raises:
        InvalidNameError: an unknown field, or a value that is not such a string.
    """
    unknown = set(fields) - set(LIMITS)
    if unknown:
        raise InvalidNameError(f"unknown provenance field(s): {', '.join(sorted(unknown))[:200]}")
    values: dict[str, str | None] = {}
    for key, limit in LIMITS.items():
        value = fields.get(key)
        if value is not None and (
            not isinstance(value, str)
            or not value
            or len(value) > limit
            or _UNPRINTABLE.search(value)
        ):
            raise InvalidNameError(
                f"provenance {key} must be 1 to {limit} printable characters or null"
            )
        values[key] = value
    commit = values["git_commit"]
    if commit is not None and not _COMMIT.fullmatch(commit.removesuffix(_DIRTY)):
        raise InvalidNameError("provenance git_commit must be 7 to 64 hex digits, or -dirty")
    return Provenance(**values)


# -- capture on the client --------------------------------------------------------------------

_REPORTED: contextvars.ContextVar[Provenance | None] = contextvars.ContextVar(
    "jaxport_reported_provenance", default=None
)


@contextlib.contextmanager
def reported_provenance(provenance: Provenance) -> Iterator[None]:
    """Pushes made inside the ``with`` block record ``provenance`` (what a registry server's
    client reported) instead of capturing this process's."""
    reset = _REPORTED.set(provenance)
    try:
        yield
    finally:
        _REPORTED.reset(reset)


def capture(sources: Sequence[Any]) -> Provenance | Callable[[], Provenance]:
    """This process's provenance for a push of ``sources`` (see ``Provenance``), or what
    ``reported_provenance`` set. In a git work tree, ``git`` runs in a thread started now; the
    call that gives the provenance waits for it (a push makes its archives meanwhile: the
    ~10 ms of a git process are not added to it). Never raises: what cannot be found is None."""
    reported = _REPORTED.get()
    if reported is not None:
        return reported
    known = Provenance(
        function_qualname=_function_names(sources),
        jax_version=_installed("jax"),
        jaxlib_version=_installed("jaxlib"),
        host=_bounded(socket.gethostname(), "host"),
        user=_bounded(_user(), "user"),
    )
    commit: list[str | None] = [None]
    try:
        directory = os.getcwd()
    except OSError:  # the working directory was removed
        return known
    if not _in_work_tree(directory):
        return known  # no thread, no process: a push outside a work tree pays a few stats
    thread = threading.Thread(
        target=lambda: commit.__setitem__(0, git_commit(directory)),
        name="jaxport-git-provenance",
        daemon=True,
    )
    thread.start()

    def provenance() -> Provenance:
        thread.join(GIT_TIMEOUT + 1.0)
        return dataclasses.replace(known, git_commit=commit[0])

    return provenance


def git_commit(directory: str) -> str | None:
    """The commit checked out in ``directory`` (``HEAD``), with ``-dirty`` appended when
    tracked files differ from it: one ``git status --porcelain=v2 --branch
    --untracked-files=no`` (its ``# branch.oid`` line, and any entry line); None without git,
    outside a work tree, before the first commit, or when git does not answer within
    ``GIT_TIMEOUT`` seconds."""
    if not _in_work_tree(directory):
        return None  # no process started: a push outside a work tree pays nothing
    status = _git(directory, "status", "--porcelain=v2", "--branch", "--untracked-files=no")
    if status is None:
        return None
    lines = status.splitlines()
    head = next((ln.split()[-1] for ln in lines if ln.startswith("# branch.oid ")), "")
    if not _COMMIT.fullmatch(head):  # "(initial)": no commit yet
        return None
    if all(ln.startswith("#") for ln in lines):
        return head
    return head[: LIMITS["git_commit"] - len(_DIRTY)] + _DIRTY


def _in_work_tree(directory: str) -> bool:
    """Whether ``directory`` or a parent holds ``.git`` (or ``GIT_DIR`` is set): a few
    ``stat`` calls, where asking git costs a process."""
    if os.environ.get("GIT_DIR"):
        return True
    path = os.path.abspath(directory)
    while True:
        if os.path.exists(os.path.join(path, ".git")):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def _git(directory: str, *args: str) -> str | None:
    environ = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            # A work tree's own config may name programs git runs on ``status``
            # (core.fsmonitor, a hook-like vector of an untrusted clone): off for this call.
            ["git", "-c", "core.fsmonitor=false", *args], cwd=directory, capture_output=True,
            timeout=GIT_TIMEOUT,
            env=environ, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace").strip()


def _function_names(sources: Sequence[Any]) -> str | None:
    """The exporting functions' names of the sources passed as objects: an ``Exported``'s
    ``fun_name``, a model's ``method=fun_name`` pairs; distinct, in order."""
    names: list[str] = []
    for source in sources:
        if hasattr(source, "mlir_module_serialized") and hasattr(source, "fun_name"):
            names.append(str(source.fun_name))
            continue
        exported = getattr(source, "exported", None)
        if isinstance(exported, Mapping) and type(source).__name__ == "Model":
            for method, e in exported.items():
                fun = str(getattr(e, "fun_name", method))
                names.append(method if fun == method else f"{method}={fun}")
    return _bounded(", ".join(dict.fromkeys(names)), "function_qualname")


@functools.cache
def _installed(package: str) -> str | None:
    """The installed release of ``package`` (read once a process: a push's hot path)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return _bounded(version(package), "jax_version")
    except PackageNotFoundError:
        return None


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's numeric uid)
        return None


def _bounded(value: str | None, field: str) -> str | None:
    """``value`` without control characters, cut to its field's limit; None for nothing."""
    if not value:
        return None
    return _UNPRINTABLE.sub("?", value)[: LIMITS[field]]


# -- the registry's model origin ---------------------------------------------------------------


def source_of(sources: Sequence[Any], url: str) -> tuple[str, int] | None:
    """The version a push of ``sources`` to the registry at ``url`` derives from by
    ``update_params``: that of a model made by ``Model.update_params`` from a model pulled from
    this registry (``Model._derived``); None otherwise (also for several such sources naming
    different versions)."""
    found = set()
    for source in sources:
        derived = getattr(source, "_derived", None)
        if type(source).__name__ == "Model" and derived is not None and derived[0] == url:
            found.add(derived[1])
    if len(found) != 1:
        return None
    name, _, version = found.pop().rpartition(":")
    return name, int(version)


def lineage_body(lineage: LineageInput) -> dict[str, Any]:
    """A push's lineage as a registry server's commit takes it (``server/_api_write.py``):
    ``derived_from`` (``NAME:VERSION``) and ``derivation`` where a source is given, and the
    ``provenance`` fields known; nothing a server before issue 26 would refuse when none is."""
    body: dict[str, Any] = {}
    if lineage.derived_from is not None:
        name, version = lineage.derived_from
        body |= {"derived_from": f"{name}:{version}", "derivation": lineage.derivation}
    known = {k: v for k, v in dataclasses.asdict(lineage.provenance).items() if v is not None}
    if known:
        body["provenance"] = known
    return body


def missing_source(name: str, version: int) -> NotFoundError:
    """The error of a push whose ``derived_from`` names no version."""
    return NotFoundError(f"derived_from: no version {name}:{version} (a source must exist)")
