"""The session store: schema, migrations, atomic commits, fence claims and reads."""

from brainhands.shared.store.draft import Draft, OutboxMessage, new_id
from brainhands.shared.store.ledger import OperationClaim, OperationLedger
from brainhands.shared.store.records import (
    CommitReceipt,
    DocumentRecord,
    EntryRecord,
    OperationRecord,
    SessionRecord,
    SessionState,
    SubmissionRecord,
    TaskRecord,
)
from brainhands.shared.store.store import Store

__all__ = [
    "CommitReceipt",
    "DocumentRecord",
    "Draft",
    "EntryRecord",
    "OperationClaim",
    "OperationLedger",
    "OperationRecord",
    "OutboxMessage",
    "SessionRecord",
    "SessionState",
    "Store",
    "SubmissionRecord",
    "TaskRecord",
    "new_id",
]
