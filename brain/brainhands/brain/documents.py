"""Typed documents: a kind's model, version and migrations, and how a pass reads and writes
its session's documents.

A session document is a JSON value its task kinds name (``TaskKind.documents``); each phase
gets copies of the ones its kind names and changes them in place, and the pass writes what
changed in the commit of the phase's result, as an increment (a JSON Patch) on the value it
read (``brainhands.shared.store``: a baseline and its increments, folded on read).

A document named by a ``DocumentKind`` is typed: its values are what a pydantic model
accepts, at a version. A value written at an older version is read through the kind's
migrations, one version at a time (``{from_version: fn(value) -> value}``, as a task kind's
are), then validated; the phase sees it as JSON (the model's dump) and may put back JSON or
a model instance. A phase that leaves a typed document holding a value its model rejects
fails, with an error naming the document and the fields (``DocumentRejected``), and nothing
of it is written. A bare name is an untyped document, any JSON value, as before.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jsonpatch
from pydantic import BaseModel, ValidationError

from brainhands.shared.errors import BrainhandsError, ConfigurationError
from brainhands.shared.store import DocumentRecord, Draft

DocumentMigration = Callable[[Any], Any]
"""``value -> value``: a document's value moving up one version of its kind."""


R = TypeVar("R")


class DocumentRejected(BrainhandsError):
    """A document's value is not one its kind accepts (or cannot be read at its version)."""


class DocumentConflict(BrainhandsError):
    """A phase changed a document that another write changed while it ran, and its change
    does not apply to the new value: the phase fails, and runs again on the new value."""


class PhaseDocuments(dict[str, Any]):
    """A phase's copies of its documents (``DocumentValues.copies``), and the records they
    were read from (``read``): what its changes are measured against."""

    def __init__(self, values: dict[str, Any], read: dict[str, DocumentRecord | None]) -> None:
        super().__init__(values)
        self.read = read


@dataclass
class DocumentKind:
    """A typed session document: ``name``, the pydantic ``model`` its values validate with
    at ``version``, and how values written at older versions migrate (``migrations``: by
    the version a step starts from)."""

    name: str
    model: type[BaseModel]
    version: int = 1
    migrations: dict[int, DocumentMigration] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ConfigurationError(f"document kind {self.name!r} needs a version >= 1")

    def migration(self, from_version: int) -> Callable[[DocumentMigration], DocumentMigration]:
        """Register how a value moves from ``from_version`` to ``from_version + 1``."""

        def register(fn: DocumentMigration) -> DocumentMigration:
            self.migrations[from_version] = fn
            return fn

        return register

    def read(self, value: Any, written_at: int | None) -> Any:
        """``value``, written at version ``written_at`` (None: before the document had a
        kind, read as version 1), at this kind's version: migrated, validated, as JSON."""
        at = 1 if written_at is None else written_at
        if at > self.version:
            raise DocumentRejected(
                f"document {self.name!r} was written at version {at} of its kind; this build "
                f"knows version {self.version}"
            )
        while at < self.version:
            step = self.migrations.get(at)
            if step is None:
                raise DocumentRejected(
                    f"document {self.name!r} was written at version {at} of its kind and no "
                    f"migration from it is declared"
                )
            value, at = step(value), at + 1
        return self.check(value)

    def check(self, value: Any) -> Any:
        """``value`` (JSON or a model instance) as JSON, if the model accepts it; None stays
        None (the document holds no value)."""
        if value is None:
            return None
        try:
            valid = value if isinstance(value, self.model) else self.model.model_validate(value)
        except ValidationError as exc:
            fields = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or '(value)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise DocumentRejected(
                f"document {self.name!r} (kind version {self.version}) rejected: {fields}"
            ) from None
        return valid.model_dump(mode="json")


def document_name(declared: str | DocumentKind) -> str:
    return declared if isinstance(declared, str) else declared.name


class Documents:
    """A pass's documents: the records as its commits leave them (``records``, the pass's
    own dict, which others write too) and their values as phases read them, at the
    versions of their kinds (``kinds``, by name; a name not in it is untyped)."""

    def __init__(
        self, records: dict[str, DocumentRecord], kinds: Mapping[str, DocumentKind]
    ) -> None:
        self.records = records
        self.kinds = kinds
        self._read: dict[str, tuple[int, Any]] = {}
        """By name: the version last read and its value (a migration runs once per version)."""

    def value(self, record: DocumentRecord | None) -> Any:
        """What a phase reads of ``record`` (None: no such document yet)."""
        if record is None:
            return None
        kind = self.kinds.get(record.name)
        if kind is None:
            return record.body
        done = self._read.get(record.name)
        if done is None or done[0] != record.version:
            done = (record.version, kind.read(record.body, record.kind_version))
            self._read[record.name] = done
        return done[1]

    def snapshot(self) -> DocumentValues:
        """The documents as they stand now, for a phase about to run."""
        return DocumentValues(dict(self.records), self)

    def changes(
        self, names: Iterable[str], docs: Mapping[str, Any], result: R
    ) -> tuple[R | DocumentConflict, dict[str, Any]]:
        """The phase's ``result`` and the values of ``names`` it changed (``docs``: its
        copies, checked), each as it is to be written now: a document another write changed
        while the phase ran gets the phase's change (its JSON Patch) applied to the new
        value, so neither write is lost; where it does not apply, the result is a
        ``DocumentConflict`` (the phase failed). A copy the phase left as it read it is not
        written, however old."""
        try:
            return result, self._changes(names, docs)
        except DocumentConflict as exc:
            return exc, {}

    def _changes(self, names: Iterable[str], docs: Mapping[str, Any]) -> dict[str, Any]:
        read = docs.read if isinstance(docs, PhaseDocuments) else {}
        changed = {}
        for name in names:
            was = read.get(name, self.records.get(name))
            before = self.value(was)
            if name not in docs or docs[name] == before:
                continue
            new = docs[name]
            current = self.records.get(name)
            if current is not None and (was is None or current.version != was.version):
                try:
                    new = jsonpatch.make_patch(before, new).apply(self.value(current))
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise DocumentConflict(
                        f"document {name!r} went from version {was.version if was else 0} to "
                        f"{current.version} while the phase ran, and its change does not apply "
                        f"to the new value: {exc}"
                    ) from exc
            changed[name] = new
        return changed

    def write(self, draft: Draft, changed: Mapping[str, Any]) -> None:
        """Put each of ``changed`` (``changes``) in ``draft``: an increment on the record as
        the pass holds it, at its kind's version."""
        for name, value in changed.items():
            current = self.records.get(name)
            kind = self.kinds.get(name)
            self.records[name] = draft.put_document(
                name,
                value,
                expected_version=current.version if current is not None else None,
                previous=current,
                kind_version=kind.version if kind is not None else None,
            )


@dataclass(frozen=True)
class DocumentValues:
    """The documents as a phase starts from them (``Documents.snapshot``)."""

    records: dict[str, DocumentRecord]
    documents: Documents

    def copies(self, names: Iterable[str]) -> dict[str, Any]:
        """Copies of the values of ``names``, for a phase to change (``DocumentRejected`` if
        a typed one cannot be read at its kind's version)."""
        read = {n: self.records.get(n) for n in names}
        return PhaseDocuments(
            {n: copy.deepcopy(self.documents.value(record)) for n, record in read.items()}, read
        )

    def check(self, docs: dict[str, Any]) -> None:
        """Make each typed value of ``docs`` JSON, or raise ``DocumentRejected``."""
        for name, value in docs.items():
            kind = self.documents.kinds.get(name)
            if kind is not None:
                docs[name] = kind.check(value)
