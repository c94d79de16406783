"""Task kinds: named, versioned sets of phases, and migrations between versions; and the
kinds of the documents they name (``brain.documents``)."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from brainhands.brain.documents import DocumentKind, document_name
from brainhands.brain.task import Call, Next, PhaseContext, TaskView
from brainhands.shared.errors import UnknownTaskKindError

Phase = Callable[[TaskView, dict[str, Any], PhaseContext], Awaitable[Next]]
Migration = Callable[[Any, Any], tuple[Any, Any]]
"""``(input, state) -> (input, state)`` for a task moving up one version."""
Compensator = Callable[[dict[str, Any], Any], Call]
"""``(arguments, result) -> Call``: the call that undoes a succeeded call (pure: it runs in
the commit that records the call's success)."""


@dataclass
class TaskKind:
    """One version of a task kind: its phases, where it starts, the documents it reads."""

    name: str
    version: int = 1
    start: str | None = None
    """The first phase (default: the first one registered)."""
    documents: tuple[str | DocumentKind, ...] = ()
    """The session documents its phases read and write: a name (an untyped document), or a
    ``DocumentKind`` (a typed one; its registry reads every document of that name with it)."""
    phases: dict[str, Phase] = field(default_factory=dict)
    light: set[str] = field(default_factory=set)
    """Phases that only compute from the state they are given (no I/O, nothing slow)."""
    compensations: dict[str, Compensator | str] = field(default_factory=dict)
    """By tool name: how this kind undoes a succeeded call of it (``compensate``)."""
    _names: tuple[tuple[str | DocumentKind, ...], tuple[str, ...]] = field(
        default=((), ()), init=False, repr=False, compare=False
    )
    """``documents`` as ``document_names`` last read it, and their names."""

    def phase(self, name: str, *, light: bool = False) -> Callable[[Phase], Phase]:
        """Register ``async def fn(task, docs, ctx) -> Next`` as the phase ``name``.

        A ``light`` phase runs as soon as it is ready and its entry is committed together
        with its result (and with the commit that made it ready): no commit of its own. A
        phase that can be slow or has effects must not be light; and since its entry is not
        recorded before it runs, a light phase that crashes the process is not counted
        toward the crash-loop limit (an exception it raises is).
        """

        def register(fn: Phase) -> Phase:
            if name in self.phases:
                raise ValueError(f"{self.name} v{self.version} has two phases named {name!r}")
            self.phases[name] = fn
            if light:
                self.light.add(name)
            if self.start is None:
                self.start = name
            return fn

        return register

    def compensate(self, tool: str, undo: Compensator | str) -> None:
        """Undo this kind's succeeded calls of ``tool`` if the task fails or is cancelled.

        ``undo`` names the compensating tool (called with ``{"operation_id", "arguments",
        "result"}`` of the original call), or derives the compensating ``Call`` from the
        call's arguments and result. It overrides the tool's own ``compensate``; the undos
        run the most recent first, each once (``brain.compensation``).
        """
        if not isinstance(undo, str) and not callable(undo):
            raise TypeError(f"compensate({tool!r}, ...) takes a tool name or a function")
        self.compensations[tool] = undo

    @property
    def document_names(self) -> tuple[str, ...]:
        """The names of ``documents``: read at every phase, made again only once
        ``documents`` is set again (``brain.context`` adds to it as agents are declared)."""
        documents, names = self._names
        if documents is not self.documents:
            names = tuple(document_name(d) for d in self.documents)
            self._names = (self.documents, names)
        return names

    @property
    def first_phase(self) -> str:
        if self.start is None:
            raise ValueError(f"task kind {self.name} v{self.version} has no phases")
        return self.start


@dataclass
class TaskRegistry:
    """The task kinds this Brain build can run, by name and version."""

    kinds: dict[tuple[str, int], TaskKind] = field(default_factory=dict)
    migrations: dict[tuple[str, int], Migration] = field(default_factory=dict)
    document_kinds: dict[str, DocumentKind] = field(default_factory=dict)
    """The typed documents its task kinds name, by name: the newest version named."""

    def add(self, kind: TaskKind) -> TaskKind:
        key = (kind.name, kind.version)
        if key in self.kinds and self.kinds[key] is not kind:
            raise ValueError(f"task kind {kind.name} v{kind.version} is registered twice")
        self.kinds[key] = kind
        for doc in kind.documents:
            if isinstance(doc, DocumentKind):
                self.add_document(doc)
        return kind

    def add_document(self, doc: DocumentKind) -> DocumentKind:
        """Read and write every document named ``doc.name`` with ``doc`` (unless a newer
        version of its kind is added)."""
        known = self.document_kinds.get(doc.name)
        if known is not None and known.version == doc.version and known is not doc:
            raise ValueError(f"document kind {doc.name} v{doc.version} is registered twice")
        if known is None or doc.version > known.version:
            self.document_kinds[doc.name] = doc
        return doc

    def include(self, other: TaskRegistry) -> TaskRegistry:
        """Add every kind and migration of ``other``; return self."""
        for kind in other.kinds.values():
            self.add(kind)
        for doc in other.document_kinds.values():
            self.add_document(doc)
        self.migrations.update(other.migrations)
        return self

    def migration(self, name: str, from_version: int) -> Callable[[Migration], Migration]:
        """Register how a ``name`` task moves from ``from_version`` to ``from_version + 1``."""

        def register(fn: Migration) -> Migration:
            self.migrations[(name, from_version)] = fn
            return fn

        return register

    def newest(self, name: str) -> TaskKind:
        versions = [k for (n, _), k in self.kinds.items() if n == name]
        if not versions:
            raise UnknownTaskKindError(f"no task kind named {name!r} in this build")
        return max(versions, key=lambda k: k.version)

    def resolve(self, name: str, version: int) -> TaskKind | None:
        """The handler for ``name`` at ``version`` exactly, or None."""
        return self.kinds.get((name, version))

    def upgrade_path(self, name: str, version: int) -> list[Migration] | None:
        """Migrations from ``version`` up to a registered version, or None if there is none."""
        path: list[Migration] = []
        while (name, version) not in self.kinds:
            step = self.migrations.get((name, version))
            if step is None:
                return None
            path.append(step)
            version += 1
        return path


def load_task_modules(paths: list[str]) -> TaskRegistry:
    """Import each module path and merge the ``registry`` (a TaskRegistry) each defines."""
    merged = TaskRegistry()
    for path in paths:
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            raise UnknownTaskKindError(f"cannot import task module {path!r}: {exc}") from exc
        found = getattr(module, "registry", None)
        if not isinstance(found, TaskRegistry):
            raise UnknownTaskKindError(
                f"task module {path!r} defines no `registry = TaskRegistry()` to load"
            )
        merged.include(found)
    return merged
