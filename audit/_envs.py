"""Environments with another jax release, made once and reused, for ``audit(jax=RELEASE)``.

``$JAXPORT_HOME/envs/jax-RELEASE`` holds a virtual environment with ``jax==RELEASE``,
``jaxlib==RELEASE`` and this jaxport (from its source tree when it is installed from one,
else ``jaxport==VERSION`` from the package index). It is made with ``uv`` when ``uv`` is on
PATH, else with ``venv`` and pip, from an interpreter the release supports: jax 0.11 and later
need Python 3.12 or newer (found as ``python3.12``/``python3.13`` under ``$PYENV_ROOT`` or on
PATH, or this interpreter if it is new enough). A file ``jaxport-env.json`` written last marks
it complete; an environment without it is made again. An environment made for another jaxport
version gets this jaxport reinstalled (its dependencies are kept).

``plan_environment`` decides everything without running anything (tested offline);
``jax_environment`` carries the plan out, one process at a time (a lock file).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from jaxport import AuditError, InvalidNameError, __version__, _children

__all__ = ["EnvironmentPlan", "cached_environment", "jax_environment", "plan_environment"]

_RELEASE = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){1,3}")
_MARKER = "jaxport-env.json"
#: Seconds one creation step may take (downloading jaxlib is most of it).
_STEP_TIMEOUT = 1800.0


@dataclasses.dataclass(frozen=True)
class EnvironmentPlan:
    """Where the environment for ``release`` lives and how it is made: ``commands`` run in
    order (empty: ``ready``, nothing to do)."""

    release: str
    directory: Path
    python: Path
    base_python: str
    commands: tuple[tuple[str, ...], ...]
    ready: bool


def plan_environment(
    release: str,
    home: Path,
    *,
    which: Callable[[str], str | None] = shutil.which,
    environ: dict[str, str] | None = None,
    current: tuple[int, int] = (sys.version_info.major, sys.version_info.minor),
) -> EnvironmentPlan:
    """The plan for ``release`` under ``home`` (nothing runs; ``which``, ``environ`` and
    ``current`` are for tests).

    Raises:
        InvalidNameError: ``release`` is not digits and dots (``0.7.0``).
        AuditError: no interpreter new enough for that release is found.
    """
    if not isinstance(release, str) or not _RELEASE.fullmatch(release):
        raise InvalidNameError(f"a jax release is digits and dots (0.7.0), got {release!r:.40}")
    directory = home / "envs" / f"jax-{release}"
    python = directory / "bin" / "python"
    marker = _read_marker(directory)
    base = _base_python(release, which, os.environ if environ is None else environ, current)
    if marker is not None and python.exists():
        if marker.get("jaxport") == __version__:
            return EnvironmentPlan(release, directory, python, base, (), True)
        return EnvironmentPlan(release, directory, python, base, _reinstall(python, which), False)
    uv = which("uv")
    packages = (f"jax=={release}", f"jaxlib=={release}", _jaxport_source())
    if uv:
        commands: tuple[tuple[str, ...], ...] = (
            (uv, "venv", "--python", base, str(directory)),
            (uv, "pip", "install", "--python", str(python), *packages),
        )
    else:
        commands = (
            (base, "-m", "venv", "--clear", str(directory)),
            (str(python), "-m", "pip", "install", "-q", *packages),
        )
    return EnvironmentPlan(release, directory, python, base, commands, False)


def jax_environment(release: str, home: Path) -> str:
    """The interpreter of the environment for ``release`` under ``home``, made if needed.

    Raises:
        InvalidNameError: ``release`` is not digits and dots.
        AuditError: a step of making it failed (the step and its last output line are named).
    """
    plan = plan_environment(release, home)
    if plan.ready:
        return str(plan.python)
    plan.directory.parent.mkdir(parents=True, exist_ok=True)
    with open(plan.directory.parent / f".jax-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be making it
        plan = plan_environment(release, home)
        for command in plan.commands:
            _run(command)
        if not plan.ready:
            marker = {"release": release, "jaxport": __version__, "base_python": plan.base_python}
            (plan.directory / _MARKER).write_text(json.dumps(marker))
    return str(plan.python)


def cached_environment(release: str, home: Path) -> str | None:
    """The interpreter of a complete environment for ``release`` under ``home`` made by this
    jaxport version, else None (nothing is made; no error for a malformed release)."""
    if not isinstance(release, str) or not _RELEASE.fullmatch(release):
        return None
    directory = home / "envs" / f"jax-{release}"
    marker, python = _read_marker(directory), directory / "bin" / "python"
    ready = marker is not None and marker.get("jaxport") == __version__ and python.exists()
    return str(python) if ready else None


def _run(command: tuple[str, ...]) -> None:
    """One step, without the registry's variables (its URL may hold a password)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    try:
        done = _children.run(command, timeout=_STEP_TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AuditError(f"making the jax environment failed at {command[:3]}: {e}") from None
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        tail = lines[-1][:300] if lines else "no output"
        raise AuditError(
            f"making the jax environment failed at {' '.join(command[:3])} (exit status "
            f"{done.returncode}): {tail}"
        )


def _read_marker(directory: Path) -> dict[str, str] | None:
    try:
        data = json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _reinstall(python: Path, which: Callable[[str], str | None]) -> tuple[tuple[str, ...], ...]:
    """Commands that put this jaxport into an existing environment, its dependencies kept."""
    source, uv = _jaxport_source(), which("uv")
    if uv:
        return ((uv, "pip", "install", "--python", str(python), "--reinstall-package",
                 "jaxport", source),)  # fmt: skip
    return ((str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", source),)


def _needs(release: str) -> tuple[int, int]:
    """The oldest Python a jax release supports (jax 0.11 dropped 3.11)."""
    parts = tuple(int(p) for p in release.split("."))
    return (3, 12) if parts >= (0, 11) else (3, 11)


def _base_python(
    release: str,
    which: Callable[[str], str | None],
    environ: dict[str, str] | os._Environ[str],
    current: tuple[int, int],
) -> str:
    """This interpreter if new enough, else a python3.12/3.13 under pyenv or on PATH."""
    needed = _needs(release)
    if current >= needed:
        return sys.executable
    root = Path(environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    for minor in range(needed[1], 15):
        found = sorted(root.glob(f"3.{minor}.*/bin/python3.{minor}")) if root.is_dir() else []
        if found:
            return str(found[-1])
        on_path = which(f"python3.{minor}")
        if on_path:
            return on_path
    raise AuditError(
        f"jax {release} needs Python {needed[0]}.{needed[1]} or newer: none found (install "
        "python3.12 on PATH or under pyenv)"
    )


def _jaxport_source() -> str:
    """This jaxport as pip names it: its source tree if installed from one, else the release."""
    import importlib.metadata

    try:
        direct = importlib.metadata.distribution("jaxport").read_text("direct_url.json")
        url = json.loads(direct or "{}").get("url", "")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        url = ""
    if isinstance(url, str) and url.startswith("file://"):
        return url.removeprefix("file://")
    return f"jaxport=={__version__}"
