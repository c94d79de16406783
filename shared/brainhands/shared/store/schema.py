"""Tables of the session store (SQLAlchemy Core).

Timestamps are epoch seconds (float): they compare the same way on every backend, and
the hot paths (due timers, outbox age) only ever compare them with "now".

Ownership: Brain writes session, entry, document, task and submission rows; Hands write
operation rows; outbox rows are written by whoever commits the state that needs the message,
and marked sent by the relay. Blob rows hold JSON too large to go inline (``MAX_INLINE_JSON``)
and are written once, never changed, by the side that has the value: Hands for a tool's
result (with its outcome), the Brain for a call's arguments (in the commit that creates the
tool task and its job) -- a write outside the Brain's rows that DESIGN §2 allows for, since
no one else can hold arguments before that commit.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from brainhands.shared.tenancy import DEFAULT_TENANT

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(64)
SESSION_ID = String(160)
"""A session's key: ``<tenant>/<id>``, each up to 64 characters (``shared/tenancy.py``)."""

session = Table(
    "session",
    metadata,
    Column("id", SESSION_ID, primary_key=True),
    # Random, given once when the session is created: the root of its task and operation ids,
    # so that no other deployment, store or re-created session ever derives the same key.
    Column("uid", String(32), nullable=False, unique=True),
    Column("compat", String(64), nullable=False),
    Column("version", BigInteger, nullable=False, server_default="0"),
    Column("fence", BigInteger, nullable=False, server_default="0"),
    Column("status", String(16), nullable=False, server_default="active"),
    Column("entry_count", BigInteger, nullable=False, server_default="0"),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # Whose it is: the tenant its key names (an API key sees its tenant's only).
    Column("tenant", String(64), nullable=False, server_default=DEFAULT_TENANT),
    Index("ix_session_tenant_updated", "tenant", "updated_at"),
)

entry = Table(
    "entry",
    metadata,
    Column("session_id", SESSION_ID, ForeignKey("session.id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("body", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    # A claim reads a session's entries from its latest checkpoint on (``load``).
    Index(
        "ix_entry_checkpoint",
        "session_id",
        "seq",
        postgresql_where=text("kind = 'checkpoint'"),
        sqlite_where=text("kind = 'checkpoint'"),
    ),
)

# A document: its version (the latest write's), and its baseline -- the value ``body`` holds,
# at version ``baseline`` -- which the increments after it fold into the latest value
# (``documents``). ``kind_version``: the version of its kind the value was written at (None:
# an untyped document); every increment after the baseline was written at it too.
document = Table(
    "document",
    metadata,
    Column("session_id", SESSION_ID, ForeignKey("session.id"), primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("body", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("baseline", BigInteger, nullable=False, server_default="0"),
    Column("kind_version", Integer, nullable=True),
)

# Every write of a document, as the RFC 6902 JSON Patch from the value before it: appended in
# the commit of the step that made it, kept as the document's history.
document_increment = Table(
    "document_increment",
    metadata,
    Column("session_id", SESSION_ID, ForeignKey("session.id"), primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("version", BigInteger, primary_key=True),
    Column("patch", JSON, nullable=False),
    Column("kind_version", Integer, nullable=True),
    Column("at", Float, nullable=False),
)

task = Table(
    "task",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", SESSION_ID, ForeignKey("session.id"), nullable=False),
    Column("parent_id", ID, nullable=True),
    Column("kind", String(128), nullable=False),
    Column("kind_version", Integer, nullable=False),
    Column("input", JSON, nullable=False),
    # Scratch data a phase hands to the next one (e.g. an operation id fixed before a call).
    Column("state", JSON, nullable=True),
    Column("submission_id", ID, nullable=True),
    Column("status", String(16), nullable=False),
    Column("phase", String(64), nullable=True),
    Column("wake_at", Float, nullable=True),
    Column("wait_for", JSON, nullable=True),
    Column("join_policy", String(16), nullable=True),
    Column("operation_id", ID, nullable=True),
    Column("outcome", String(16), nullable=True),
    Column("result", JSON, nullable=True),
    Column("error", JSON, nullable=True),
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("restarts", Integer, nullable=False, server_default="0"),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    Column("blocked_reason", Text, nullable=True),
    # A wait for a signal (status waiting, wake_at its timeout if any): its name, and whether
    # only one signal can ever be received under it (then its timeout is sent as that one).
    Column("wait_signal", String(128), nullable=True),
    Column("wait_exclusive", Boolean, nullable=False, server_default=text("false")),
    # The signal the wait received, for the phase it resumes.
    Column("signal", JSON, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index(None, "session_id", "status"),
    Index(None, "status", "wake_at"),
    Index(None, "parent_id"),
)

submission = Table(
    "submission",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", SESSION_ID, ForeignKey("session.id"), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("input", JSON, nullable=False),
    Column("answer", JSON, nullable=True),
    Column("error", Text, nullable=True),
    # The root task whose end answers it: the one it started, or the loop it joined.
    Column("task_id", ID, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # Who submitted it, as its credential says: what a four-eyes approval compares.
    Column("principal", String(160), nullable=True),
    # Where its end is posted (a webhook), and how that delivery stands: tried
    # ``callback_attempts`` times, next at ``callback_next_at``, done (or given up) at
    # ``callback_done_at``. Written by the sweeper that delivers it.
    Column("callback_url", Text, nullable=True),
    Column("callback_attempts", Integer, nullable=False, server_default="0"),
    Column("callback_next_at", Float, nullable=True),
    Column("callback_done_at", Float, nullable=True),
    Column("callback_error", Text, nullable=True),
    UniqueConstraint("session_id", "request_id"),
    # The sweeper's look for queued submissions across all sessions. Partial, so it holds
    # the few waiting their turn, not every submission ever answered.
    Index(
        "ix_submission_queued",
        "created_at",
        postgresql_where=text("status = 'queued'"),
        sqlite_where=text("status = 'queued'"),
    ),
)

outbox = Table(
    "outbox",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("session_id", SESSION_ID, nullable=True),
    Column("routing_key", String(255), nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("headers", JSON, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("sent_at", Float, nullable=True),
    # Until then the row is left to the relay of the process that wrote it, which publishes
    # it right after the commit; other relays take it only if that did not happen.
    Column("publish_after", Float, nullable=True),
    # The relay's hot query: the oldest unsent rows. Partial, so it stays small.
    Index(
        "ix_outbox_unsent",
        "id",
        postgresql_where=text("sent_at IS NULL"),
        sqlite_where=text("sent_at IS NULL"),
    ),
    Index(None, "sent_at"),
)

operation = Table(
    "operation",
    metadata,
    Column("operation_id", ID, primary_key=True),
    Column("session_id", SESSION_ID, nullable=False),
    Column("task_id", ID, nullable=True),
    Column("tool", String(128), nullable=False),
    Column("pool", String(64), nullable=False),
    # Empty when the arguments are too large to go inline: then they are in this blob.
    Column("arguments", JSON, nullable=False),
    Column("arguments_blob_id", ID, nullable=True),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # Attempts cut short by their worker's death or a lost lease: not the tool's failures.
    Column("interruptions", Integer, nullable=False, server_default="0"),
    # Claims since the holders' last settling write (a retry scheduled, a start marked): more
    # than the claimer's own means an earlier holder may have started the call unmarked.
    Column("unsettled_claims", Integer, nullable=True),
    Column("fence", BigInteger, nullable=False, server_default="0"),
    # What the tool noted of the work its call started elsewhere (``ToolContext.note_handle``).
    Column("handle", Text, nullable=True),
    Column("result", JSON, nullable=True),
    Column("error", JSON, nullable=True),
    Column("blob_id", ID, nullable=True),  # the result, when it is too large to go inline
    Column("next_attempt_at", Float, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    Index(None, "session_id"),
    Index(None, "status", "updated_at"),
)

blob = Table(
    "blob",
    metadata,
    Column("id", ID, primary_key=True),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
)

# A session's workspaces (``shared/workspace_trees.py``): each version is a root tree's hash,
# committed by the Hands with the outcome of the call that made it (``operation_id``; None
# for a version a client gave). Versions count from 1 without gaps: a call that ran on
# version n commits n + 1 only if no other call did first (the primary key decides).
workspace_version = Table(
    "workspace_version",
    metadata,
    Column("session_id", SESSION_ID, primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("version", BigInteger, primary_key=True),
    Column("root", String(64), nullable=False),
    Column("operation_id", ID, nullable=True),
    Column("files", Integer, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
)

# The objects of a tenant's workspaces, by hash: files' contents and trees, each kept once
# for all its sessions and versions, written before the version that names them commits.
# Their bytes are ``data``, or, with an object store configured, the object at ``location``
# there (``object_bytes``). ``touched_at``: when a writer last wrote it or found it there
# for a version to come; an object no version names is collected once it is older than
# that version could take.
workspace_object = Table(
    "workspace_object",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("hash", String(64), primary_key=True),
    Column("data", LargeBinary, nullable=True),
    Column("location", String(200), nullable=True),
    Column("touched_at", Float, nullable=False),
)

# Requests to a session that a Brain carries out when it next runs it (a cancel; a signal,
# an approval's decision among them): a client writes them without a lease, the Brain
# applies each once. A signal is kept until a task waits for its name.
inbox = Table(
    "inbox",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("session_id", SESSION_ID, ForeignKey("session.id"), nullable=False),
    Column("kind", String(32), nullable=False),
    # A signal's id in its namespace (``vocabulary.signal_key``): a prefix and 128 characters.
    Column("key", String(192), nullable=False),
    Column("body", JSON, nullable=True),
    Column("name", String(128), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("applied_at", Float, nullable=True),
    UniqueConstraint("session_id", "kind", "key"),
    # What a Brain and the sweeper look for: the requests not applied yet. Partial, so small.
    Index(
        "ix_inbox_unapplied",
        "session_id",
        postgresql_where=text("applied_at IS NULL"),
        sqlite_where=text("applied_at IS NULL"),
    ),
)

tool_declaration = Table(
    "tool_declaration",
    metadata,
    # What a Hands build says of each tool it serves, written when it starts: how a process
    # that does not import the tool's code (a Brain, the CLI) learns its pool and schema.
    Column("name", String(128), primary_key=True),
    Column("pool", String(64), nullable=False),
    Column("policy", String(16), nullable=False),
    Column("description", Text, nullable=False),
    Column("args_schema", JSON, nullable=False),
    Column("approval", Boolean, nullable=False, server_default=text("false")),
    # The tool that undoes a succeeded call of this one (``compensate``), if any.
    Column("compensate", String(128), nullable=True),
    # Why the tool got its policy, when that is not simply its author's word (an MCP tool).
    Column("policy_reason", Text, nullable=True),
    # The condition on a call's arguments under which it waits for approval (JSON, see
    # ``shared.conditions``), if any: null on rows written before it existed.
    Column("approval_when", JSON, nullable=True),
    # Of the declaration's content: a build that declares the same tool differently is seen.
    Column("digest", String(64), nullable=False),
    Column("declared_at", Float, nullable=False),
)

agent_declaration = Table(
    "agent_declaration",
    metadata,
    # What a Brain build serves, written when it starts: how the API, which runs no agent,
    # refuses a message for an agent no Brain of its compatibility key has.
    Column("compat", String(64), primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("declared_at", Float, nullable=False),
)

api_key = Table(
    "api_key",
    metadata,
    # A key is ``bh_<id>_<secret>``; only the secret's SHA-256 is kept.
    Column("id", String(32), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("name", String(128), nullable=False),
    Column("scopes", JSON, nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)

tenant_budget = Table(
    "tenant_budget",
    metadata,
    # A tenant's budget, set by an operator: its limits (``TENANT_BUDGET_LIMITS``) over
    # everything its sessions' runs spend from when it was first set (``tenant_budgets``).
    Column("tenant", String(64), primary_key=True),
    Column("limits", JSON, nullable=False),
    Column("set_by", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

tenant_usage = Table(
    "tenant_usage",
    metadata,
    # What a tenant with a budget has spent, in shards (by a hash of the session): each
    # commit that spends adds to its session's shard in the same transaction, so commits of
    # the tenant's sessions seldom wait for one another; a read adds the shards up.
    Column("tenant", String(64), primary_key=True),
    Column("shard", Integer, primary_key=True),
    Column("tokens", BigInteger, nullable=False, server_default="0"),
    Column("cost", Float, nullable=False, server_default="0"),
    Column("tool_calls", BigInteger, nullable=False, server_default="0"),
)

webhook_secret = Table(
    "webhook_secret",
    metadata,
    # Which of a tenant's webhook secrets sign its posts (``webhook_secrets``): the secrets
    # themselves are derived from the deployment's key, never stored. No row: generation
    # 0. ``previous_until``: posts are also signed with generation - 1 until then.
    Column("tenant", String(64), primary_key=True),
    Column("generation", Integer, nullable=False),
    Column("previous_until", Float, nullable=True),
    Column("rotated_by", String(128), nullable=False),
    Column("rotated_at", Float, nullable=False),
)

schedule = Table(
    "schedule",
    metadata,
    # A tenant's schedule (``shared/schedules.py``): each tick submits ``input`` to its own
    # session of ``compat``, ``<id>@<tick>``. ``next_tick_at`` moves only by compare-and-set
    # from the value a sweeper read, so two sweepers never both advance it.
    Column("tenant", String(64), primary_key=True),
    Column("id", String(64), primary_key=True),
    Column("agent", String(128), nullable=True),
    Column("kind", String(128), nullable=True),
    Column("input", JSON, nullable=True),
    Column("compat", String(64), nullable=False),
    Column("cron", String(256), nullable=True),
    Column("timezone", String(64), nullable=True),
    Column("every", Integer, nullable=True),
    Column("missed", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("next_tick_at", Float, nullable=False),
    Column("last_tick_at", Float, nullable=True),
    Column("created_by", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_by", String(128), nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_schedule_state_next_tick_at", "state", "next_tick_at"),
)

erasure = Table(
    "erasure",
    metadata,
    # A session erased (``erasures``): who asked and when, why (``erased`` by a request,
    # ``expired`` at the end of its retention), and how many rows went -- none of its
    # content. ``resources``: the lease resources (the session's, its calls') whose Redis
    # keys the sweeper still has to delete; None once it has.
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("session_id", SESSION_ID, nullable=False),
    Column("tenant", String(64), nullable=False),
    Column("principal", String(160), nullable=False),
    Column("reason", String(16), nullable=False),
    Column("rows", JSON, nullable=False),
    Column("resources", JSON, nullable=True),
    Column("erased_at", Float, nullable=False),
    Index(None, "session_id"),
    Index(
        "ix_erasure_resources",
        "id",
        postgresql_where=text("resources IS NOT NULL"),
        sqlite_where=text("resources IS NOT NULL"),
    ),
)
