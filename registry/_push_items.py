"""What a push stores, before anything is written: each source (an ``Exported``, a
``jaxport.Model``, archive or jax-native bytes, a path, a ``StoredModel`` a server's store
holds) turned into a ``PushItem``, validated in full (``registry/_publish.py`` says what is
stored and how), and the checks across a version's variants."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxport import DuplicateVariantError, InvalidNameError, NotFoundError
from jaxport._files import read_regular
from jaxport.export._internal import ArchiveChunks, Part, chunks_info, split_archive
from jaxport.registry._golden import check_examples, runs_here
from jaxport.registry._model_parts import FUNCTION, MODEL
from jaxport.registry._names import check_name
from jaxport.registry._stored_push import stored_model
from jaxport.registry._uploads import StoredModel

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.export import ArchiveInfo, Model
    from jaxport.export._internal import VerdictCache

__all__ = [
    "PushItem",
    "Source",
    "allowed",
    "check_distinct",
    "check_kinds",
    "prepare",
    "push_name",
    "runner",
]

#: What ``push`` accepts: an Exported, a jaxport.Model, archive or jax-native bytes, or a path.
Source = Any


@dataclasses.dataclass(frozen=True)
class PushItem:
    """One variant to store: its digest and size (bytes), header, what runs it (an Exported or
    a Model, for examples), notes, a model archive's parts, and the blobs to store (a function
    archive's bytes; a model's parts, views of its chunks where they can be)."""

    digest: str
    size: int
    info: ArchiveInfo
    notes: tuple[str, ...]
    blobs: Mapping[str, bytes | memoryview]
    exported: Exported | None = None
    model: Model | None = None
    parts: tuple[Part, ...] = ()
    #: Parts the store holds, checked by its own checksums (``_stored_push``): not written.
    stored: tuple[str, ...] = ()
    #: The caller passed ``exported`` / ``model`` as an object (its own code, in its own
    #: process): only such a variant is called to compute examples' outputs, never one read
    #: from bytes or a file (issue 24, F13: a call here has no time limit).
    callers: bool = False

    @property
    def kind(self) -> str:
        return MODEL if self.info.kind == MODEL else FUNCTION


def push_name(name: str | None, first: PushItem) -> str:
    if name is not None:
        return check_name(name)
    if first.kind == MODEL:
        raise InvalidNameError("a model has no function name: pass name= to push")
    try:
        return check_name(first.info.fun_name)
    except InvalidNameError as e:
        raise InvalidNameError(f"{e}; pass name= to push") from None


def check_distinct(items: Sequence[PushItem], sources: Sequence[Source]) -> None:
    """Refuses variants that ``pull`` could not tell apart: the same archive twice, or two
    with a platform in common and the same device count (a pull for that platform and count
    would pick one without a word). Refusal, not a tie-break rule: no use needs such a pair
    (pick a variant by its digest instead).

    Raises:
        DuplicateVariantError: naming both variants.
    """
    seen: list[tuple[str, PushItem]] = []
    for i, (item, source) in enumerate(zip(items, sources, strict=True), start=1):
        where = os.fspath(source) if isinstance(source, str | os.PathLike) else f"variant {i}"
        label = f"{where} (sha256:{item.digest[:12]})"
        for other_label, other in seen:
            common = sorted(set(item.info.platforms) & set(other.info.platforms))
            if item.digest == other.digest:
                why = "are the same archive"
            elif common and item.info.nr_devices == other.info.nr_devices:
                why = (
                    f"both run on {', '.join(common)} with {item.info.nr_devices} device(s): "
                    "a pull could not choose between them"
                )
            else:
                continue
            raise DuplicateVariantError(
                f"{other_label} and {label} {why}; push one of them, or the other as "
                "another version or name",
                variants=(other_label, label),
            )
        seen.append((label, item))


def check_kinds(items: Sequence[PushItem], examples: Any) -> None:
    """A version's variants are all functions or all models; a model's examples are
    ``{method: [Example, ...]}`` for methods it has, a function's a sequence."""
    kinds = {i.kind for i in items}
    if len(kinds) > 1:
        raise InvalidNameError(
            "a version's variants are all functions or all models: push them as two names"
        )
    if examples:
        check_examples(items[0].info, examples)


def runner(items: Sequence[PushItem]) -> Exported | Model | None:
    """A variant the caller passed as an object that runs here, to compute examples' outputs
    (None: none does; ``PushItem.callers``)."""
    for i in items:
        runner = i.model if i.kind == MODEL else i.exported
        # None: a newer jax's, not parsed here; not the caller's: bytes or a file
        if runner is not None and i.callers and runs_here(i.info):
            return runner
    return None


# -- turning sources into archives -----------------------------------------------------------


def allowed(allow_custom_calls: Sequence[str]) -> tuple[str, ...]:
    """``allow_custom_calls`` checked now (a single string is a TypeError, as for ``loads``)."""
    from jaxport.export import allowed_targets

    allowed_targets(allow_custom_calls)
    return tuple(allow_custom_calls)


def prepare(
    source: Source, vjp_order: int, verdicts: VerdictCache, max_size: int, allow: tuple[str, ...]
) -> PushItem:
    from jaxport.export import Model

    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            data = read_regular(path, InvalidNameError, max_size=max_size)
        except FileNotFoundError:
            raise NotFoundError(f"no such file: {path}") from None
        except OSError as e:
            raise InvalidNameError(f"cannot read {path}: {e.strerror}") from None
        return _stored_even_if_newer(data, str(path), verdicts, allow)
    if isinstance(source, bytes | bytearray | memoryview):
        return _stored_even_if_newer(bytes(source), None, verdicts, allow)
    if isinstance(source, Model):
        item = _model_item(ArchiveChunks(source.dump_chunks(rehash=True)), source, None)
        return dataclasses.replace(item, callers=True)
    if isinstance(source, StoredModel):
        return _stored_item(source, verdicts, allow)
    if hasattr(source, "mlir_module_serialized") and hasattr(source, "in_avals"):
        from jaxport.export import dumps

        return dataclasses.replace(
            _item(dumps(source, vjp_order=vjp_order), source, ()), callers=True
        )
    raise InvalidNameError(
        f"push takes an Exported, a Model, archive bytes or a path, got {type(source).__name__}"
    )


def _stored_even_if_newer(
    data: bytes, path: str | None, verdicts: VerdictCache, allow: tuple[str, ...]
) -> PushItem:
    """``_from_bytes``, where an archive a newer jax wrote is stored too (a registry serves
    many jax releases): every digest, limit and header fact is checked as for any archive, but
    its newer modules cannot be parsed by this jax (``newer_modules_passed``), so the item
    runs nothing here (examples need their outputs given) and its notes say so."""
    from jaxport.export._internal import newer_modules_passed, newer_note

    with newer_modules_passed() as newer:
        item = _from_bytes(data, path, verdicts, allow)
    if not newer:
        return item
    return dataclasses.replace(
        item, exported=None, model=None, notes=(*item.notes, newer_note(newer))
    )


def _from_bytes(
    data: bytes, path: str | None, verdicts: VerdictCache, allow: tuple[str, ...]
) -> PushItem:
    from jaxport.export._internal import MAGIC

    if data.startswith(MAGIC):
        from jaxport.export import inspect

        if inspect(data).kind == MODEL:
            model = _validated_model(data, path, verdicts, allow)
            return _model_item(ArchiveChunks([data]), model, path)
        return _item(data, _validated(data, path, verdicts, allow), ())
    from jaxport.export import convert_native

    converted = convert_native(data, path=path)
    notes = [f"converted from jax-native bytes{f' ({path})' if path else ''}: the producer's "
             "jax version is not recorded there (stored as unknown)"]  # fmt: skip
    if converted.symbolic:
        notes.append(
            "jax's native format does not keep symbolic-shape constraints: calls are not "
            "checked against constraints the exporter declared"
        )
    archive = converted.archive
    return _item(archive, _validated(archive, path, verdicts, allow), tuple(notes))


def _validated_model(
    data: bytes,
    path: str | None,
    verdicts: VerdictCache | None = None,
    allow_custom_calls: Sequence[str] = (),
) -> Model:
    """The model in ``data``, read in full: every method and VJP level, every tensor checked
    against its digest.

    Raises:
        CorruptArchiveError, IntegrityError, UnsupportedVersionError,
            UnsupportedFeatureError: see ``jaxport.loads_model``.
    """
    from jaxport.export import loads_model

    model = loads_model(
        data,
        path=path,
        verdicts=verdicts,
        allow_custom_calls=allow_custom_calls,
        outside_window="allow",
    )
    model.params  # noqa: B018  (reads every tensor and checks its digest)
    for name, exported in model.exported.items():
        current = exported
        for _ in range(model.vjp_orders[name]):
            current = current.vjp()
    return model


def _validated(
    data: bytes, path: str | None, verdicts: VerdictCache, allow: tuple[str, ...] = ()
) -> Exported:
    """The Exported of a jaxport archive, after reading all of it (every VJP level, every
    module vetted in the sandbox)."""
    from jaxport.export import inspect, loads

    exported: Exported = loads(
        data, path=path, verdicts=verdicts, allow_custom_calls=allow, outside_window="allow"
    )
    current = exported
    for _ in range(inspect(data).vjp_order):
        current = current.vjp()
    return exported


def _item(data: bytes, exported: Exported, notes: tuple[str, ...]) -> PushItem:
    from jaxport.export import inspect

    digest = hashlib.sha256(data).hexdigest()
    return PushItem(digest, len(data), inspect(data), notes, {digest: data}, exported=exported)


def _stored_item(source: StoredModel, verdicts: VerdictCache, allow: tuple[str, ...]) -> PushItem:
    """A model archive the store holds in parts, its tensors unread (``_stored_push``); one a
    newer jax wrote is stored, not run, as ``_stored_even_if_newer`` says."""
    from jaxport.export._internal import newer_note

    info, model, newer = stored_model(source, verdicts, allow)
    parts = source.archive.parts
    return PushItem(
        source.archive.digest, source.archive.size, info, (newer_note(newer),) if newer else (),
        {}, model=None if newer else model, parts=parts,
        stored=tuple(dict.fromkeys(p.digest for p in parts)),
    )  # fmt: skip


def _model_item(archive: ArchiveChunks, model: Model, path: str | None) -> PushItem:
    """A model archive to store in parts, never joined: ``archive`` is a ``Model``'s chunks
    (its tensors are views of its arrays) or validated bytes (``_validated_model``)."""
    info = chunks_info(archive)
    parts = split_archive(archive, info, path=path)
    blobs = {p.digest: archive.view(p.offset, p.end) for p in parts}
    return PushItem(archive.sha256(), archive.size, info, (), blobs, model=model, parts=parts)
