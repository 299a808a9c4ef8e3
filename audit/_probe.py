"""What an audit's findings are keyed by, read without starting jax: the jax and jaxlib
releases of an interpreter and how many devices of each platform its workers will see.

Reading package metadata takes milliseconds, so an audit whose findings are all stored starts
no worker and parses no module. Device counts are known without jax where jax itself decides
them from the environment: on CPU, ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``
(1 without it); a GPU or TPU platform whose plugin is not installed has 0. Where a plugin is
installed the count is only known to jax (``None``): findings for that platform are audited
again each time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess

from jaxport import AuditError, NotFoundError, _children
from jaxport._environ import worker_environment

__all__ = ["EnvironmentKey", "environment_key", "key_from_metadata"]

#: Distributions that give jax each platform's devices (any one present: count unknown).
_PLUGINS = {
    "cuda": ("jax-cuda12-plugin", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda13-pjrt"),
    "rocm": ("jax-rocm6-plugin", "jax-rocm7-plugin", "jax-rocm6-pjrt", "jax-rocm7-pjrt"),
    "tpu": ("libtpu", "libtpu-nightly"),
}
_DEVICE_COUNT = re.compile(r"--xla_force_host_platform_device_count=([0-9]+)")
#: Run by another interpreter: prints its distributions' versions as JSON (no jax import).
_SCRIPT = (
    "import importlib.metadata as m, json\n"
    "def v(n):\n"
    "    try:\n"
    "        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "names = {names}\n"
    "print(json.dumps({{n: v(n) for n in names}}))\n"
)


@dataclasses.dataclass(frozen=True)
class EnvironmentKey:
    """The jax and jaxlib releases of an interpreter, and per platform the devices its
    workers see (None: only jax knows, so findings for that platform are never reused)."""

    jax_version: str
    jaxlib_version: str
    devices: dict[str, int | None]


def environment_key(python: str | None) -> EnvironmentKey:
    """The key of ``python``'s jax (None: this interpreter), from package metadata.

    Raises:
        NotFoundError: ``python`` does not exist or is not executable.
        AuditError: ``python`` cannot report its packages, or has no jax.
    """
    names = ("jax", "jaxlib", *(n for group in _PLUGINS.values() for n in group))
    if python is None:
        import importlib.metadata as metadata

        versions: dict[str, str | None] = {}
        for n in names:
            try:
                versions[n] = metadata.version(n)
            except metadata.PackageNotFoundError:
                versions[n] = None
    else:
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise NotFoundError(f"no Python interpreter at {python}")
        versions = _versions_of(python, names)
    return key_from_metadata(versions, worker_environment())


def key_from_metadata(versions: dict[str, str | None], environ: dict[str, str]) -> EnvironmentKey:
    """The key from distribution versions (None: not installed) and the workers' environment
    (``JAX_NUM_CPU_DEVICES``, else ``XLA_FLAGS``'s forced host device count, else 1 CPU; a
    platform left out of ``JAX_PLATFORMS`` has 0 devices).

    Raises:
        AuditError: jax or jaxlib is not installed.
    """
    jax_version, jaxlib_version = versions.get("jax"), versions.get("jaxlib")
    if not jax_version or not jaxlib_version:
        raise AuditError("no jax and jaxlib installed in the auditing environment")
    counts = _DEVICE_COUNT.findall(environ.get("XLA_FLAGS", ""))
    cpu: int | None = int(counts[-1]) if counts else 1
    if environ.get("JAX_NUM_CPU_DEVICES", "").strip():
        number = environ["JAX_NUM_CPU_DEVICES"].strip()
        cpu = int(number) if number.isdigit() else None
    devices: dict[str, int | None] = {"cpu": cpu}
    for platform, plugins in _PLUGINS.items():
        devices[platform] = None if any(versions.get(p) for p in plugins) else 0
    allowed = {p.strip() for p in environ.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    for platform in devices if allowed else ():  # JAX_PLATFORMS=cpu: no GPU or TPU device
        gpu = platform in ("cuda", "rocm") and "gpu" in allowed
        if platform not in allowed and not gpu:
            devices[platform] = 0
    return EnvironmentKey(jax_version, jaxlib_version, devices)


def _versions_of(python: str, names: tuple[str, ...]) -> dict[str, str | None]:
    script = _SCRIPT.format(names=repr(names))
    try:
        done = _children.run([python, "-P", "-c", script], timeout=60, env=worker_environment())
        found = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        raise AuditError(
            f"the audit environment did not start with {python}: it could not report its jax "
            f"({type(e).__name__})"
        ) from None
    if done.returncode != 0 or not isinstance(found, dict):
        raise AuditError(
            f"the audit environment did not start with {python}: it could not report its jax "
            f"(exit status {done.returncode})"
        )
    return {n: found.get(n) if isinstance(found.get(n), str) else None for n in names}
