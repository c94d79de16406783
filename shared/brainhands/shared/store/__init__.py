"""The session store: schema, migrations, atomic commits, fence claims and reads.

``Store`` is the one door to it: code outside this package calls its methods (and its
parts': ``store.submissions``, ``store.inbox``, ``store.ledger``, ``store.outbox``,
``store.declarations``, ``store.queries``) and reads the records and values named here; it
never imports a module of this package, nor touches its tables (an import-linter contract
keeps it so).
"""

from brainhands.shared.store.api_keys import ApiKeyRecord
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.store.claims import OperationClaim
from brainhands.shared.store.details import SessionDetail
from brainhands.shared.store.draft import (
    COMPACT_AFTER,
    Draft,
    NewTask,
    OutboxMessage,
    SubmissionChange,
    TaskChange,
    TaskOrigin,
    TenantCharge,
    new_id,
)
from brainhands.shared.store.erasures import Erased, Erasures
from brainhands.shared.store.guard import ANSWER_CHANNEL, SESSION_CHANNEL
from brainhands.shared.store.inbox import InboxReceipt
from brainhands.shared.store.ledger import OperationLedger
from brainhands.shared.store.listings import SessionFilter, SessionSummary
from brainhands.shared.store.load import CHECKPOINT_KIND
from brainhands.shared.store.migrate import behind_head, head_revision
from brainhands.shared.store.notifications import NotificationFeed
from brainhands.shared.store.object_bytes import ObjectBytes, object_store_at
from brainhands.shared.store.queries import PendingCall, SessionRef
from brainhands.shared.store.records import (
    FINAL_OPERATION_STATUSES,
    FINAL_SUBMISSION_STATUSES,
    JSON,
    ClaimedSession,
    CommitReceipt,
    DocumentHistory,
    DocumentIncrement,
    DocumentRecord,
    EntryRecord,
    InboxRecord,
    JoinPolicy,
    OperationRecord,
    OperationStatus,
    OutboxRow,
    SessionRecord,
    SessionState,
    SubmissionRecord,
    SubmissionStatus,
    TaskOutcome,
    TaskRecord,
    TaskStatus,
)
from brainhands.shared.store.schedules import ScheduleRecord
from brainhands.shared.store.store import Store
from brainhands.shared.store.submissions import CallbackDue, SubmitReceipt
from brainhands.shared.store.tenant_budgets import TenantBudget
from brainhands.shared.store.webhook_secrets import WebhookSecretState
from brainhands.shared.store.workspaces import WorkspaceAdvance, Workspaces, WorkspaceVersion

__all__ = [
    "ANSWER_CHANNEL",
    "CHECKPOINT_KIND",
    "COMPACT_AFTER",
    "FINAL_OPERATION_STATUSES",
    "FINAL_SUBMISSION_STATUSES",
    "JSON",
    "SESSION_CHANNEL",
    "ApiKeyRecord",
    "CallbackDue",
    "ClaimedSession",
    "CommitReceipt",
    "DocumentHistory",
    "DocumentIncrement",
    "DocumentRecord",
    "Draft",
    "EntryRecord",
    "Erased",
    "Erasures",
    "InboxReceipt",
    "InboxRecord",
    "JoinPolicy",
    "NewTask",
    "NotificationFeed",
    "ObjectBytes",
    "OperationClaim",
    "OperationLedger",
    "OperationRecord",
    "OperationStatus",
    "OutboxMessage",
    "OutboxRow",
    "PendingCall",
    "ScheduleRecord",
    "SessionDetail",
    "SessionFilter",
    "SessionRecord",
    "SessionRef",
    "SessionState",
    "SessionSummary",
    "Store",
    "SubmissionChange",
    "SubmissionRecord",
    "SubmissionStatus",
    "SubmitReceipt",
    "TaskChange",
    "TaskOrigin",
    "TaskOutcome",
    "TaskRecord",
    "TaskStatus",
    "TenantBudget",
    "TenantCharge",
    "ToolCatalog",
    "WebhookSecretState",
    "WorkspaceAdvance",
    "WorkspaceVersion",
    "Workspaces",
    "behind_head",
    "head_revision",
    "new_id",
    "object_store_at",
]
