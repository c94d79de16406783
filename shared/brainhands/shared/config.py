"""Settings, parsed once at start-up from ``BRAINHANDS_*`` environment variables.

Inner code never reads the environment: it takes the values it needs as arguments.
Every setting has a default that works on one machine with the services on their
standard local ports and the store in a SQLite file.
"""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from brainhands.shared.destinations import AllowList, parse_allow_list
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.tenancy import DEFAULT_TENANT, check_tenant
from brainhands.shared.topology import QueueType, Topology

ENV_PREFIX = "BRAINHANDS_"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///brainhands.db"


def normalize_database_url(url: str) -> str:
    """Map the URL forms users write to the async drivers the store runs on.

    A PostgreSQL URL may name several servers, as libpq does
    (``postgresql://user@host1:5432,host2:5432/db?target_session_attrs=read-write``): each
    connection then goes to the first that answers as asked, so a store that fails over to
    its standby is found again without a restart.
    """
    if url.startswith(("postgres://", "postgresql://")):
        return _hosts_as_parameters("postgresql+asyncpg://" + url.split("://", 1)[1])
    if url.startswith("sqlite://") and not url.startswith("sqlite+aiosqlite://"):
        return "sqlite+aiosqlite://" + url.split("://", 1)[1]
    if url.startswith("postgresql+asyncpg://"):
        return _hosts_as_parameters(url)
    if url.startswith("sqlite+aiosqlite://"):
        return url
    raise ValueError(
        "must be a PostgreSQL URL (postgresql://user@host/db) or a SQLite URL "
        "(sqlite:///path/to/file.db)"
    )


def _hosts_as_parameters(url: str) -> str:
    """libpq's hosts list (``host1:port1,host2:port2`` before the path) as the ``host`` query
    parameters the asyncpg driver's URLs carry it in; a URL of one host as it is."""
    scheme, rest = url.split("://", 1)
    authority, slash, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if "," not in hosts:
        return url
    database, _, query = path.partition("?")
    parameters = [f"host={host}" for host in hosts.split(",") if host]
    if query:
        parameters.append(query)
    return f"{scheme}://{userinfo}{at}{slash or '/'}{database}?{'&'.join(parameters)}"


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, whatever its scheme: what logs and
    messages may show of a service's address."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def parse_addresses(value: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as (host, port) pairs; ``ValueError`` saying which is not."""
    found = []
    for item in (part.strip() for part in value.split(",")):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not host:port (expected host:port,host:port)")
        found.append((host, int(port)))
    return found


def broker_node_urls(url: str) -> list[str]:
    """One AMQP URL per RabbitMQ node that ``url`` names, in the order written.

    A cluster is written as PostgreSQL's servers are (``amqp://user:password@host1:5672,
    host2:5672,host3:5672/vhost``): the nodes of one cluster share its users and virtual
    hosts, so only the address differs from node to node. ``ValueError`` names what is wrong.
    """
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in ("amqp", "amqps"):
        raise ValueError("must be an AMQP URL (amqp://user:password@host:5672/vhost)")
    cut = next((i for i, char in enumerate(rest) if char in "/?#"), len(rest))
    authority, tail = rest[:cut], rest[cut:]
    userinfo, at, hosts = authority.rpartition("@")
    urls = []
    for host in (part.strip() for part in hosts.split(",")):
        address = urlsplit(f"{scheme}://{host}")
        try:
            valid = bool(address.hostname) and address.port != 0
        except ValueError:  # a port that is not a number from 1 to 65535
            valid = False
        if not valid:
            raise ValueError(
                f"{host!r} is not host or host:port (a cluster's nodes: "
                "amqp://user:password@host1:5672,host2:5672/vhost)"
            )
        urls.append(f"{scheme}://{userinfo}{at}{host}{tail}")
    return urls


OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "file")
"""The object stores ``workspace_objects`` may name."""


class CommonSettings(BaseSettings):
    """What every process needs: where the store, the broker and Redis are."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    database_schema: str | None = None
    """PostgreSQL schema holding the tables (default: the database's search path)."""
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    """The broker; a cluster's nodes as ``amqp://user:password@host1:5672,host2:5672/vhost``,
    tried in turn at every (re)connection (``broker_node_urls``)."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_sentinels: str = ""
    """Redis Sentinels (``host:port,host:port``) that say where the primary is, followed
    through failovers; empty: ``redis_url`` names the server itself (with Sentinels it gives
    the database and password only)."""
    redis_sentinel_master: str = Field(default="brainhands", min_length=1)
    """The name the Sentinels monitor the Redis primary under."""
    lease_hand_over: bool = True
    """Let a lease that its holder handed over be claimed by the next holder's first commit
    (one store transaction fewer a pass). Always off with Sentinels; turn it off for a Redis
    that fails over behind one address, which may lose its last acknowledged writes."""
    namespace: str = "brainhands"
    """Prefix of every queue, exchange and Redis key, so deployments can share services."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector for traces (e.g. http://collector:4318); unset: no export."""
    http_port: int = Field(default=0, ge=-1, le=65535)
    """Port of /healthz, /readyz and /metrics: 0 picks a free one (logged), -1 turns it off."""
    delivery_limit: int = Field(default=5, ge=1)
    """Returns of a message before it is parked; the same in every process."""
    queue_type: QueueType = "quorum"
    """``quorum`` (replicated over a cluster; the default) or ``classic`` (durable, on one
    node: cheaper, for a single-node broker); the same in every process (docs/deploy.md)."""
    tenant: str = DEFAULT_TENANT
    """The tenant whose sessions the CLI and ``Client.from_settings`` act on."""
    webhook_secret: SecretStr | None = None
    """Key from which each tenant's webhook secret is derived (``webhook_signing``): the
    webhooks posted when a submission with a ``callback_url`` ends are signed with their
    tenant's (HMAC-SHA256); needed by the sweepers that post them and the API that accepts
    them."""
    webhook_allow: str = ""
    """Destinations a webhook may be posted to although they are not public addresses
    (loopback, private, link-local ... are refused otherwise): networks (``10.1.0.0/16``,
    ``127.0.0.1``) and ``host:port`` pairs (``hooks.internal:8443``), comma-separated;
    the same in the API and the sweepers (``shared.destinations``)."""
    startup_deadline: float = Field(default=300.0, gt=0)
    """Seconds a starting process waits for a service that does not answer (the store,
    RabbitMQ, Redis) before it exits, saying which: long enough to outlast a server's restart
    or a managed database's failover (a minute or two), short enough that a wrong address
    shows as a failing process within minutes."""
    startup_retry_max: float = Field(default=10.0, gt=0)
    """Longest pause, in seconds, between a starting process's attempts to reach a service
    (the pauses double from 0.1 s up to it)."""
    workspace_objects: str | None = None
    """The object store that holds workspace objects' bytes (``s3://bucket/prefix``,
    ``gs://...``, ``az://...``, ``file:///path``), configured as that store's own settings
    say (``AWS_ENDPOINT_URL``, ...); unset: the store's rows hold them. The same in every
    process that reads or writes workspaces (Hands, API, sweeper, clients)."""
    identity: str = Field(default="operator", min_length=1, max_length=128)
    """Who the CLI's and ``Client.from_settings``'s acts are recorded as (a decision's
    principal, a submission's)."""

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return normalize_database_url(value)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return check_tenant(value)

    @field_validator("rabbitmq_url")
    @classmethod
    def _rabbitmq_url(cls, value: str) -> str:
        broker_node_urls(value)
        return value

    @field_validator("workspace_objects")
    @classmethod
    def _workspace_objects(cls, value: str | None) -> str | None:
        if value and value.partition("://")[0].lower() not in OBJECT_STORE_SCHEMES:
            schemes = ", ".join(f"{s}://" for s in OBJECT_STORE_SCHEMES)
            raise ValueError(f"must be an object store's URL ({schemes}...)")
        return value or None

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a Redis URL (redis://host:6379/0)")
        return value

    @field_validator("webhook_allow")
    @classmethod
    def _webhook_allow(cls, value: str) -> str:
        parse_allow_list(value)
        return value

    @property
    def webhook_allow_list(self) -> AllowList:
        """The operator's exceptions to the webhooks' public-address rule."""
        return parse_allow_list(self.webhook_allow)

    @field_validator("redis_sentinels")
    @classmethod
    def _redis_sentinels(cls, value: str) -> str:
        if value.strip():
            parse_addresses(value)
        return value.strip()

    def topology(self) -> Topology:
        """The deployment's RabbitMQ names and queue arguments."""
        return Topology(
            self.namespace, delivery_limit=self.delivery_limit, queue_type=self.queue_type
        )

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """The Sentinels' addresses (none: Redis is ``redis_url`` itself)."""
        return parse_addresses(self.redis_sentinels) if self.redis_sentinels else []

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not value or not all(c.isalnum() or c in "-_" for c in value):
            raise ValueError("must be a non-empty name of letters, digits, '-' or '_'")
        return value


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S]) -> S:
    """Parse settings of ``cls`` from the environment, or fail naming the variable to fix."""
    try:
        return cls()
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        problems = "; ".join(
            f"{prefix}{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(f"invalid configuration: {problems}") from exc
