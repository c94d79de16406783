"""LangGraph's checkpoints kept in the session store: the saver of a hosted graph's run.

A compiled graph recovers by its checkpoints: after each super-step LangGraph ``put``\\s a
checkpoint (every channel's value, which nodes run next), and ``put_writes`` the writes of
a step's tasks that finished while another failed or was interrupted. This saver keeps
both in the run's journal (``brain.hosted.journal``): the records already committed, as
``hosted_checkpoint`` entries, are what it starts from; the records a pass makes are kept
in ``journal.fresh_checkpoints``, which the ``hosted.session`` task commits with what the
pass decided (the tool calls a step dispatched), in one transaction. A Brain killed before
that commit leaves none of it: the next pass resumes from the last committed checkpoint,
and the nodes after it run again, as LangGraph's own recovery runs them.

A record is JSON: LangGraph's own serialiser (``serde``) makes the bytes, kept as base64,
beside the plain ids that find it; the bytes are decoded only when LangGraph reads the
record (a pass, the last checkpoint's). One run is one thread: every record belongs to the
run whose journal holds it.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)

from brainhands.brain.hosted.journal import Journal


def _subgraph(config: RunnableConfig) -> bool:
    """A subgraph's own checkpoints are not kept: it runs whole within its parent's step."""
    return bool(config["configurable"].get("checkpoint_ns", ""))


class SessionSaver(BaseCheckpointSaver[int]):
    """The checkpointer of one pass over a hosted graph's run (``journal``)."""

    def __init__(self, journal: Journal, thread: str) -> None:
        super().__init__()
        self.journal = journal
        self.thread = thread
        self.order: list[str] = []
        """Checkpoint ids, oldest first."""
        self.records: dict[str, dict[str, Any]] = {}
        """Each checkpoint's record, by id: decoded when read (``_saved``). A pass resumes
        from the last, so decoding every checkpoint of the run at every pass would make a
        run's cost grow with the square of its steps."""
        self.decoded: dict[str, tuple[Checkpoint, CheckpointMetadata, str | None]] = {}
        self.writes: dict[str, list[dict[str, Any]]] = {}
        """The records of pending writes, by the id of the checkpoint they follow."""
        for record in journal.checkpoints:
            self._load(record)

    # Records, as the journal keeps them --------------------------------------------------

    def _dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode()]

    def _undump(self, typed: Sequence[str]) -> Any:
        return self.serde.loads_typed((typed[0], base64.b64decode(typed[1])))

    def _load(self, record: dict[str, Any]) -> None:
        if "checkpoint" in record:
            self.order.append(record["id"])
            self.records[record["id"]] = record
        else:
            self.writes.setdefault(record["checkpoint_id"], []).append(record)

    def _keep(self, record: dict[str, Any]) -> None:
        self._load(record)
        self.journal.fresh_checkpoints.append(record)

    def _saved(self, checkpoint_id: str) -> tuple[Checkpoint, CheckpointMetadata, str | None]:
        """The checkpoint ``checkpoint_id``, its metadata and its parent's id."""
        if checkpoint_id not in self.decoded:
            record = self.records[checkpoint_id]
            self.decoded[checkpoint_id] = (
                self._undump(record["checkpoint"]),
                self._undump(record["metadata"]),
                record["parent"],
            )
        return self.decoded[checkpoint_id]

    def _pending(self, checkpoint_id: str) -> list[tuple[str, str, Any]]:
        """The writes kept after the checkpoint ``checkpoint_id``: a task's writes to a
        channel once (the first record that has them)."""
        pending: list[tuple[str, str, Any]] = []
        for record in self.writes.get(checkpoint_id, []):
            task = record["task_id"]
            known = {(t, channel) for t, channel, _ in pending}
            for channel, value in record["writes"]:
                if (task, channel) not in known:
                    pending.append((task, channel, self._undump(value)))
        return pending

    def _config(self, checkpoint_id: str) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": self.thread,
                "checkpoint_ns": "",
                "checkpoint_id": checkpoint_id,
            }
        }

    def _tuple(self, checkpoint_id: str) -> CheckpointTuple:
        checkpoint, metadata, parent = self._saved(checkpoint_id)
        return CheckpointTuple(
            config=self._config(checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=self._config(parent) if parent is not None else None,
            pending_writes=self._pending(checkpoint_id),
        )

    # BaseCheckpointSaver ------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if _subgraph(config):
            return None
        wanted = get_checkpoint_id(config)
        if wanted is None:
            return self._tuple(self.order[-1]) if self.order else None
        return self._tuple(wanted) if wanted in self.records else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        ids = list(reversed(self.order))
        if before is not None and (stop := get_checkpoint_id(before)) in ids:
            ids = ids[ids.index(stop) + 1 :]
        found = 0
        for checkpoint_id in ids:
            metadata = self._saved(checkpoint_id)[1]
            if filter and any(metadata.get(k) != v for k, v in filter.items()):
                continue
            if limit is not None and found >= limit:
                return
            found += 1
            yield self._tuple(checkpoint_id)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if _subgraph(config):
            return {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}
        self._keep(
            {
                "checkpoint": self._dump(checkpoint),
                "metadata": self._dump(metadata),
                "parent": config["configurable"].get("checkpoint_id"),
                # Plain, for a reader of the session's entries: which super-step it closes.
                "id": checkpoint["id"],
                "step": metadata.get("step", -1),
            }
        )
        return self._config(checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if _subgraph(config):
            return
        self._keep(
            {
                "checkpoint_id": config["configurable"]["checkpoint_id"],
                "task_id": task_id,
                "writes": [[channel, self._dump(value)] for channel, value in writes],
            }
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in self.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)
