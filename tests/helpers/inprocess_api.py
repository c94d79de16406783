"""The API in-process in front of a real store and broker, with a Brain pass run on demand:
what an attack needs (requests of several tenants' keys) at the cost of no process.

The app is the one ``brainhands api`` serves, driven through httpx's ASGI transport; a
session is run by one in-process Brain pass (``run``), as the Brain workers would run it
on the wake-up the API published, so that a test reads exactly what one pass made.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI

from brainhands.api.app import create_app
from brainhands.api.changes import SessionChanges
from brainhands.api.keys import Scope, create_key
from brainhands.api.live import LiveNotes
from brainhands.api.settings import ApiSettings
from brainhands.brain.agent import AgentRegistry, agent_kinds
from brainhands.brain.edits import RunSummary
from brainhands.brain.registry import TaskRegistry
from brainhands.brain.scheduler import SessionRunner
from brainhands.client.direct import Client
from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import Store
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.tenancy import session_key
from brainhands.shared.tools import ToolDeclaration
from tests.helpers.stores import drop_pg_schema


@dataclass
class InProcessApi:
    app: FastAPI
    client: Client
    tasks: TaskRegistry

    @property
    def store(self) -> Store:
        return self.client.store

    def http(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url="http://127.0.0.1",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )

    async def key(self, tenant: str, *scopes: Scope) -> str:
        """A new key of ``tenant`` with ``scopes``."""
        _, key = await create_key(self.store, tenant=tenant, scopes=list(scopes), name=tenant)
        return key

    async def declare(self, *tools: ToolDeclaration) -> None:
        """Declare ``tools``, as the Hands serving them would at start-up."""
        await self.store.declarations.declare_tools(list(tools))

    async def run(self, tenant: str, session_id: str) -> RunSummary:
        """One Brain pass over ``tenant``'s session ``session_id``."""
        key = session_key(tenant, session_id)
        token = (await self.store.load(key)).session.fence + 1
        await self.store.claim_session_fence(key, token)
        runner = SessionRunner(
            store=self.store,
            tasks=self.tasks,
            tools=ToolCatalog(self.store),
            topology=self.client.broker.topology,
            session_id=key,
            fence=token,
            max_restarts=3,
            declaration_grace=0.0,
        )
        return await runner.run()


@asynccontextmanager
async def inprocess_api(
    postgres_url: str, rabbitmq_url: str, namespace: str, tasks: TaskRegistry, **settings: object
) -> AsyncIterator[InProcessApi]:
    """The API app (``settings`` as ``BRAINHANDS_API_*`` would set them) on a fresh
    PostgreSQL schema, its Brain passes running ``tasks`` and the approval gates."""
    url, schema = normalize_database_url(postgres_url), f"t{uuid.uuid4().hex[:12]}"
    await (await Store.open(url, upgrade=True, db_schema=schema)).close()
    client = await Client.connect(
        database_url=url,
        rabbitmq_url=rabbitmq_url,
        namespace=namespace,
        database_schema=schema,
        tenant=None,
        principal="api",
    )
    changes, live = SessionChanges(client.store), LiveNotes(client.broker)
    try:
        await changes.start()
        await live.start()
        api_settings = ApiSettings(namespace=namespace, **settings)  # type: ignore[arg-type]
        app = create_app(client, changes, live, api_settings)
        brain_kinds = TaskRegistry().include(tasks)
        brain_kinds.include(agent_kinds(AgentRegistry(), ToolCatalog(client.store)))
        yield InProcessApi(app, client, brain_kinds)
    finally:
        await live.close()
        await changes.close()
        await client.close()
        await asyncio.to_thread(drop_pg_schema, url, schema)
