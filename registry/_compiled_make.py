"""Compiling one archive's methods on this host, in a child process (``jaxport/_compile_child.py``)
with a jax cache directory of its own: what ``Registry.compile`` stores, per method.

The child gets the allow-listed environment (``jaxport/_environ.py``: ``XLA_FLAGS`` and
``JAX_*`` pass, so its compile options are this process's), a time limit, and dies with this
process (``jaxport._children``). Its files cross back as files; their names are checked
(``check_file_name``) before any is read.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxport import TimeLimitError, UnsupportedFeatureError
from jaxport._compiled_host import HostKey
from jaxport.registry._compiled_types import CompiledFile, CompiledSet, check_file_name
from jaxport.registry._types import VariantInfo

__all__ = ["Compiled", "compile_archive"]

#: The child's exit status when the archive cannot be read (``_compile_child.NOT_READ``).
_NOT_READ = 3
#: Per method: the set made (its files' bytes by name), or the set with ``status="skipped"``.
Compiled = list[tuple[CompiledSet, dict[str, bytes]]]


def compile_archive(
    archive: Path, variant: VariantInfo, allow_custom_calls: Sequence[str], timeout: float
) -> Compiled:
    """Each method of the archive at ``archive`` (``variant``'s), compiled here in a child.

    Raises:
        TimeLimitError: the child did not end within ``timeout`` seconds (it was killed).
        UnsupportedFeatureError: the child cannot read the archive, or crashed.
    """
    from jaxport import _children
    from jaxport._environ import worker_environment

    with tempfile.TemporaryDirectory(prefix="jaxport-compile-") as tmp:
        work = Path(tmp)
        request = {"archive": str(archive), "allow_custom_calls": list(allow_custom_calls)}
        (work / "request.json").write_text(json.dumps(request))
        cmd = [sys.executable, "-I", "-m", "jaxport._compile_child", str(work)]
        env = {k: v for k, v in worker_environment().items()
               if not k.startswith("JAX_COMPILATION_CACHE")}  # fmt: skip
        try:
            done = _children.run(cmd, timeout=timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise TimeLimitError(
                f"compiling {_where(variant)} took over {timeout:g} s; the child was stopped",
                seconds=timeout,
            ) from None
        if done.returncode != 0 or not (work / "facts.json").is_file():
            said = (done.stdout or done.stderr).decode(errors="replace").strip()[-500:]
            what = "cannot read it" if done.returncode == _NOT_READ else "failed"
            raise UnsupportedFeatureError(
                f"compiling {_where(variant)}: the child {what} (exit {done.returncode}): {said}"
            )
        facts = json.loads((work / "facts.json").read_text())
        return _sets(variant, facts, work / "cache")


def _sets(variant: VariantInfo, facts: dict[str, Any], cache: Path) -> Compiled:
    host = HostKey(**facts["host"])
    made: Compiled = []
    for method, said in facts["methods"].items():
        base = CompiledSet(
            variant.digest, method, host.platform, host.device_kind, host.jax_version,
            host.jaxlib_version, variant.nr_devices, host.options, (),
        )  # fmt: skip
        if "skipped" in said:
            made.append((_skipped(base, said["skipped"]), {}))
            continue
        data = {check_file_name(n): (cache / n).read_bytes() for n in said["files"]}
        files = tuple(
            CompiledFile(n, hashlib.sha256(b).hexdigest(), len(b)) for n, b in data.items()
        )
        made.append((_with_files(base, files), data))
    return made


def _skipped(base: CompiledSet, reason: str) -> CompiledSet:
    import dataclasses

    return dataclasses.replace(base, status="skipped", reason=str(reason))


def _with_files(base: CompiledSet, files: tuple[CompiledFile, ...]) -> CompiledSet:
    import dataclasses

    return dataclasses.replace(base, files=files)


def _where(variant: VariantInfo) -> str:
    return f"{variant.name}:{variant.version} (variant sha256:{variant.digest[:12]})"
