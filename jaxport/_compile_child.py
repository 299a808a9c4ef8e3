"""The child of ``jaxport compile`` (``registry/_compiled_make.py``): compiles each method of one
archive with jax's persistent compilation cache on, in a cache directory of its own, and says
which files each compile wrote.

``PYTHON -I -m jaxport._compile_child WORKDIR`` reads ``WORKDIR/request.json`` (``archive``:
the archive's path; ``allow_custom_calls``), points jax's cache at ``WORKDIR/cache`` (every
compile written: ``jax_persistent_cache_min_compile_time_secs=0``,
``jax_persistent_cache_min_entry_size_bytes=-1``; ``jax_persistent_cache_enable_xla_caches``
``XLA_CACHES``: see there), then compiles, from the archive's avals
alone (nothing runs, no tensor is read):

- a function archive: ``jax.jit(exp.call)`` (what ``jaxport run`` and a caller's
  ``jax.jit(exp.call)(...)`` compile), its method named "";
- a model: each method as ``Model`` calls it (``method.lower``: the parameters the module keeps,
  with the shardings the method expects, then the arguments).

It writes ``WORKDIR/facts.json``: ``host`` (``jaxport._compiled_host.HostKey.facts()``) and
``methods``: per method, ``files`` (the names written under ``cache/``, byte for byte what jax
wrote, ``-atime`` files included where this jax writes them) or ``skipped`` (why not: symbolic
input shapes, too few devices, a compile error). Exit status 0: facts written; 3: the archive
cannot be read here (the error on stdout).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["NOT_READ", "main"]

#: The archive cannot be read by this jax (``registry/_compiled_make.py`` knows it too).
NOT_READ = 3


def main(workdir: str) -> int:
    """Compiles the request in ``workdir``; the exit status."""
    work = Path(workdir)
    request = json.loads((work / "request.json").read_text())
    cache = work / "cache"
    cache.mkdir()
    import jax

    from jaxport._compiled_host import XLA_CACHES

    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    # jax's default adds XLA's GPU autotune cache *under the cache directory* to the compile
    # options, and so the directory's path to the cache key: off (XLA_CACHES), the key is the
    # same in whichever directory the files are later put (the using process does the same).
    jax.config.update("jax_persistent_cache_enable_xla_caches", XLA_CACHES)
    from jaxport import JaxportError
    from jaxport._compiled_host import host_key

    try:
        lowerings = _lowerings(Path(request["archive"]), tuple(request["allow_custom_calls"]))
    except JaxportError as e:
        print(f"{type(e).__name__}: {str(e)[:500]}")
        return NOT_READ
    methods = {name: _compiled(lower, cache) for name, lower in lowerings.items()}
    facts = {"host": host_key().facts(), "methods": methods}
    (work / "facts.json").write_text(json.dumps(facts))
    return 0


def _lowerings(archive: Path, allowed: tuple[str, ...]) -> dict[str, Any]:
    """Per method ("" for a function), a callable that lowers it, or the reason it cannot be."""
    import jax

    from jaxport.export import inspect, load, load_model

    if inspect(archive).kind != "model":
        exp = load(archive, allow_custom_calls=allowed)
        return {"": _lowering(lambda *a: jax.jit(exp.call).lower(*a), exp, 0)}
    model = load_model(archive, allow_custom_calls=allowed)
    n = len(model.tensors)
    return {name: _lowering(model.methods[name].lower, exp, n)  # type: ignore[attr-defined]
            for name, exp in model.exported.items()}  # fmt: skip


def _lowering(lower: Any, exp: Any, skip: int) -> Any:
    """``lower`` applied to the argument specs of ``exp`` (after ``skip`` parameter leaves), or
    the reason there are none: symbolic shapes, more devices than here."""
    import jax
    from jax import tree_util

    avals = exp.in_avals[skip:]
    if any(not isinstance(d, int) for a in avals for d in a.shape):
        return "symbolic input shapes: jax compiles it per call shape"
    if exp.nr_devices > len(jax.devices()):
        return f"it needs {exp.nr_devices} devices, this host has {len(jax.devices())}"
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    trees = tree_util.treedef_children(tree_util.treedef_children(exp.in_tree)[0])
    args = tree_util.tree_unflatten(tree_util.treedef_tuple(trees[1 if skip else 0 :]), specs)
    return lambda: lower(*args)


def _compiled(lowering: Any, cache: Path) -> dict[str, Any]:
    """Compiles one method; the files that compile added to ``cache``, or why none."""
    if isinstance(lowering, str):
        return {"skipped": lowering}
    before = set(p.name for p in cache.iterdir())
    try:
        lowering().compile()
    except Exception as e:  # jax's and XLA's refusals: the method is left out, with why
        return {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    files = sorted(p.name for p in cache.iterdir() if p.name not in before)
    if not files:
        return {"skipped": "jax wrote no persistent-cache file for it (an unsupported backend?)"}
    return {"files": files}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
