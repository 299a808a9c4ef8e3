"""``Registry``'s compiled executables (issue 27 §2): ``compile`` stores signed sets of a
version's compiled methods for this host; ``use_compiled`` (and ``pull``/``pull_model`` with
``use_compiled``) writes the verified ones into jax's persistent compilation cache. What a set
is and the rules: ``registry/_compiled_types.py``; the checks: ``registry/_compiled_seed.py``.
A mixin of ``Registry`` (``registry/_registry.py``)."""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxport import (
    InvalidNameError,
    JaxportError,
    JaxportWarning,
    NotFoundError,
    UnsupportedFeatureError,
)
from jaxport.registry._backend import Backend
from jaxport.registry._compiled_types import (
    CompiledPolicy,
    CompiledSet,
    CompiledUse,
    manifest_bytes,
    policy_from_env,
)
from jaxport.registry._names import check_allowlist, check_timeout
from jaxport.registry._platforms import LOCAL_PLATFORM, chosen_platform
from jaxport.registry._types import VariantInfo

__all__ = ["CompiledFallbackWarning", "RegistryCompiled"]


class CompiledFallbackWarning(JaxportWarning):
    """A pull asked to use compiled executables and (some of) them were not used: jax compiles
    instead; the message says why (``CompiledUse.reason``)."""


class RegistryCompiled:
    """``Registry``'s compiled executables (see ``Registry``)."""

    _backend: Backend
    compiled: CompiledPolicy | None
    #: The report of the latest pull of this registry that used compiled sets (or tried to).
    last_compiled_use: CompiledUse | None = None

    def compile(
        self,
        reference: str,
        *,
        private_key: str | os.PathLike[str] | None = None,
        password: str | None = None,
        platform: Any = LOCAL_PLATFORM,
        allow_custom_calls: Sequence[str] = (),
        timeout: float = 600.0,
    ) -> builtins.list[CompiledSet]:
        """Compiles each method of each variant of a version that runs on this host, in a
        child process (``jaxport/_compile_child.py``), and stores what jax's persistent
        compilation cache wrote as a signed set per method: keyed by (variant digest, method,
        platform, device kind, jax and jaxlib release, compile options), its manifest signed
        with ``private_key`` (``model-signing``, as ``sign``). Running it again stores nothing
        new (``status == "already stored"``) unless the bytes or the signer changed.

        Args:
            reference: ``NAME:VERSION``, ``NAME@ALIAS``, ``sha256:PREFIX`` or ``NAME``.
            private_key: a PEM elliptic-curve private key. Without one the methods are
                compiled (so that a failure shows) and nothing is stored (``status ==
                "not stored"``): an unsigned set would never be used.
            password: the key's password, if it is encrypted.
            platform: only this platform's variants (default: this host's); another
                platform than this host's compiles nothing (each variant ``"skipped"``).
            allow_custom_calls: custom-call targets to admit, as ``pull``.
            timeout: seconds one variant's compile may take (its child is then killed).

        Returns:
            A ``CompiledSet`` per method of each variant (``status``: ``"stored"``,
            ``"already stored"``, ``"not stored"``, ``"skipped"`` with ``reason``).

        Raises:
            UnsupportedFeatureError: a registry server older than the compiled sets'
                routes; the child cannot read an archive or crashed.
            TimeLimitError: a compile took over ``timeout`` seconds.
            SignatureError: the key cannot be read (through a server: or the server found
                the bundle not signing the set's manifest).
            PermissionDeniedError: through a server, a token without ``write`` on the name.
            (and see ``get``)
        """
        self._backend.check_writable()
        timeout = check_timeout(timeout, "timeout")
        allowed = check_allowlist(allow_custom_calls)
        wanted, here = chosen_platform(platform), chosen_platform(LOCAL_PLATFORM)
        ref = self._backend.get(reference)
        out: builtins.list[CompiledSet] = []
        for variant in ref.variants:
            out += self._compile_variant(
                variant, (wanted, here), allowed, timeout, private_key=private_key,
                password=password,
            )  # fmt: skip
        return out

    def _compile_digest(
        self,
        digest: str,
        *,
        platform: str,
        private_key: str | os.PathLike[str],
        password: str | None,
        timeout: float,
    ) -> builtins.list[CompiledSet]:
        """``compile`` of the one variant whose archive is ``digest`` (64 hex digits) for
        ``platform``: the audit queue's, after a passing audit (``registry/_queue_compile.py``).
        This process's jax backend is not started (an audit worker's accelerator is its
        children's): the compile child says which platform this host compiles for, and a set of
        another platform is ``skipped``, not stored.

        Raises:
            NotFoundError: no variant holds that archive any more. (and see ``compile``)
        """
        self._backend.check_writable()
        ref = self._backend.get(f"sha256:{digest}")
        variants = [v for v in ref.variants if v.digest == digest]
        if not variants:
            raise NotFoundError(f"no variant holds the archive sha256:{digest}")
        return self._compile_variant(
            variants[0], (platform, None), (), timeout, private_key=private_key,
            password=password,
        )  # fmt: skip

    def _compile_variant(
        self,
        variant: VariantInfo,
        platforms: tuple[str | None, str | None],
        allowed: Sequence[str],
        timeout: float,
        *,
        private_key: str | os.PathLike[str] | None,
        password: str | None,
    ) -> builtins.list[CompiledSet]:
        """``compile``'s work for one variant: compiled in a child when it runs here, each
        method's set stored signed with ``private_key`` (or why not). ``platforms``: the one
        asked for and this host's (None: not known here, the child's decides)."""
        from jaxport._signing import sign_digest
        from jaxport.registry._compiled_make import compile_archive

        store = self._compiled_store(variant.name)
        wanted, here = platforms
        if wanted not in variant.platforms or here not in (None, wanted):
            return [_skipped(variant, here, wanted)]
        with tempfile.TemporaryDirectory(prefix="jaxport-compile-") as tmp:
            path = Path(tmp) / "in.jaxport"
            self._backend.write_file(f"sha256:{variant.digest}", variant, path)
            made = compile_archive(path, variant, allowed, timeout)
        out: builtins.list[CompiledSet] = []
        for one, files in made:
            if one.platform != wanted:  # the child's host compiles for another platform
                out.append(dataclasses.replace(_skipped(variant, one.platform, wanted),
                                               method=one.method))  # fmt: skip
            elif one.status == "skipped":
                out.append(one)
            elif private_key is None:
                why = "no key given: an unsigned set is never used, so none was stored"
                out.append(dataclasses.replace(one, status="not stored", reason=why))
            else:
                manifest = manifest_bytes(one)
                digest = hashlib.sha256(manifest).hexdigest()
                signed = sign_digest(digest, private_key, password=password)
                one = dataclasses.replace(one, signer=signed.signer)
                out.append(store.store(one, manifest, signed.bundle, files))
        return out

    def compiled_sets(self, reference: str) -> builtins.list[CompiledSet]:
        """The compiled sets stored for a version's variants, as their rows say (not verified:
        ``use_compiled`` verifies).

        Raises:
            UnsupportedFeatureError: a registry server older than the compiled sets' routes.
            (and see ``get``)
        """
        ref = self._backend.get(reference)
        store = self._compiled_store(ref.name)
        return [s.made for v in ref.variants for s in store.sets_of(v.digest)]

    def use_compiled(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
        method: str | None = None,
        policy: CompiledPolicy | None = None,
    ) -> CompiledUse:
        """Writes the compiled sets of the variant ``resolve`` chooses (of ``method``, else of
        every method) that verify with ``policy``'s keys (default: the registry's
        ``compiled`` policy, else ``$JAXPORT_USE_COMPILED`` with ``$JAXPORT_COMPILED_KEYS``)
        and match this host into jax's persistent compilation cache directory; a first call
        of the method then loads the executable instead of compiling. Never raises for a set
        that cannot be used: the report says why (``CompiledUse.reason``, ``skipped``).

        Raises:
            UnsupportedFeatureError: a registry server older than the compiled sets' routes.
            (and see ``resolve``)
        """
        chosen = self._chosen(reference, version, platform, nr_devices)  # type: ignore[attr-defined]
        return self._seeded(chosen, method, policy or self._policy())

    def _use_compiled(
        self, chosen: VariantInfo, method: str | None, use_compiled: bool | CompiledPolicy | None
    ) -> None:
        """``pull``'s and ``pull_model``'s ``use_compiled``: seeds when asked (or by the
        registry's policy), records the report and warns when something was not used."""
        if use_compiled is not None and not isinstance(use_compiled, bool | CompiledPolicy):
            raise InvalidNameError("use_compiled must be True, False, None or a CompiledPolicy")
        if use_compiled is False:
            return
        policy = use_compiled if isinstance(use_compiled, CompiledPolicy) else self._policy()
        if policy is None and use_compiled is None:
            return
        if policy is None:
            use = CompiledUse(False, "no trusted key: give Registry(compiled=CompiledPolicy("
                              "trusted=[...])) or $JAXPORT_COMPILED_KEYS")  # fmt: skip
        else:
            try:
                use = self._seeded(chosen, method, policy)
            except UnsupportedFeatureError as e:  # a registry server: the pull goes on
                use = CompiledUse(False, str(e))
            except JaxportError as e:  # the sets cannot be listed (a server's bad answer)
                use = CompiledUse(False, f"{type(e).__name__}: {str(e)[:300]}")
        self.last_compiled_use = use
        if not use.used or use.skipped:
            what = f"{chosen.name}:{chosen.version}"
            warnings.warn(
                f"{what}: compiled executables not used, jax compiles: {use.reason or _said(use)}",
                CompiledFallbackWarning,
                stacklevel=3,
            )

    def _seeded(
        self, chosen: VariantInfo, method: str | None, policy: CompiledPolicy | None
    ) -> CompiledUse:
        from jaxport._compiled_host import host_key
        from jaxport.registry._compiled_seed import seed

        store = self._compiled_store(chosen.name)
        if chosen.kind != "model":
            methods = [""]
        else:
            methods = [method] if method is not None else [m.name for m in chosen.methods]
        # a resolved variant lists no methods: those with stored sets are the candidates
        trusted = policy.trusted if policy is not None else ()
        return seed(store, chosen, methods or None, trusted, host_key())

    def _policy(self) -> CompiledPolicy | None:
        return self.compiled if self.compiled is not None else policy_from_env()

    def _compiled_store(self, name: str | None = None) -> Any:
        from jaxport.registry._compiled_store import CompiledStore

        engine, blobs = getattr(self._backend, "engine", None), self._backend.blobs
        http = getattr(self._backend, "_http", None)
        if engine is None and http is not None and name is not None:
            from jaxport.registry._compiled_http import HttpCompiledStore

            return HttpCompiledStore(http, name, self._backend.lacks)
        if engine is None or blobs is None:
            self._backend.lacks("compiled executables (compile and use them with a direct "
                                "registry)")  # fmt: skip
        return CompiledStore(engine, blobs)


def _skipped(variant: VariantInfo, here: str | None, wanted: str | None) -> CompiledSet:
    reason = (
        f"this host compiles for {here}, not {wanted}"
        if wanted != here
        else f"the variant runs on {', '.join(variant.platforms)}, this host is {here}"
    )
    return CompiledSet(
        variant.digest, "", str(wanted), "", "", "", variant.nr_devices, {}, (),
        status="skipped", reason=reason,
    )  # fmt: skip


def _said(use: CompiledUse) -> str:
    return "; ".join(f"{m or 'the function'}: {r}" for m, r in use.skipped.items())
