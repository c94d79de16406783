"""The API: every act of the client, over HTTP, for an API key's tenant.

Each route is a thin door onto ``brainhands.Client``: a submit, a cancel, a decision or a
signal is the same durable request the Python client makes, carried out by a Brain, and
recorded as the key's (``key:<id>``), whatever a body says. Session ids are the key's
tenant's own (``shared/tenancy.py``): the same id in two tenants is two sessions, and
nothing a key sends reaches or reveals another tenant's. Every error is answered with an
``application/problem+json`` body saying what is wrong.

``create_app`` builds what the routes share (the keys, the quotas, the change feed's
readers) and assembles the routers, one concern each: ``health``, ``submissions``,
``sessions``, ``streams``, ``approvals``, ``signals``, ``compensations`` and ``tenants``.
"""

from __future__ import annotations

import secrets
from functools import partial

from fastapi import FastAPI

from brainhands.api.approvals import approval_routes
from brainhands.api.changes import SessionChanges
from brainhands.api.compensations import compensation_routes
from brainhands.api.console import mount_console
from brainhands.api.guard import Guarded, document_keys, still_valid
from brainhands.api.health import health_routes
from brainhands.api.keys import VerifiedKeys
from brainhands.api.known import KnownAgents, KnownSessions
from brainhands.api.live import LiveNotes
from brainhands.api.long_polls import LongPolls
from brainhands.api.problems import PROBLEMS, answer_problems
from brainhands.api.protect import protect
from brainhands.api.quota import Quotas
from brainhands.api.schedules import schedule_routes
from brainhands.api.sessions import session_routes
from brainhands.api.settings import ApiSettings
from brainhands.api.shared_lists import SharedLists
from brainhands.api.shared_views import SharedViews
from brainhands.api.signals import signal_routes
from brainhands.api.stream_tokens import StreamTokens
from brainhands.api.streams import stream_routes
from brainhands.api.submissions import submission_routes
from brainhands.api.tenants import tenant_routes
from brainhands.api.watcher import Watchers
from brainhands.api.workspaces import workspace_routes
from brainhands.client.direct import Client


def create_app(
    client: Client, changes: SessionChanges, live: LiveNotes, settings: ApiSettings
) -> FastAPI:
    """The API in front of ``client``: ``changes`` and ``live`` are the process's feeds of
    commits and live notes, shared by every stream and long poll."""
    app = FastAPI(
        title="brainhands",
        summary="Durable tool-using agents: submit, watch, approve, signal.",
        version="1",
        responses=PROBLEMS,
        openapi_url=None,  # served by health_routes, for a key, when turned on
        docs_url=None,  # its pages load their code from elsewhere: none is served
        redoc_url=None,
    )
    app.router.route_class = Guarded
    document_keys(app)
    protect(app, settings)
    app.state.client, app.state.settings = client, settings
    app.state.keys = keys = VerifiedKeys(client.store)
    secret = settings.api_token_secret
    app.state.stream_tokens = tokens = StreamTokens(
        secret.get_secret_value().encode() if secret else secrets.token_bytes(32)
    )
    app.state.quotas = quotas = Quotas(
        rate=settings.api_rate, burst=settings.api_burst, max_streams=settings.api_max_streams
    )
    store = client.store
    mount_console(app)
    views = SharedViews(client, changes)
    lists = SharedLists(store, changes)
    app.state.watchers = watchers = Watchers(valid=partial(still_valid, keys))
    long_polls = LongPolls(client, changes, watchers, quotas)
    known = KnownSessions(store)
    agents = KnownAgents(store, settings.api_compat)
    four_eyes = settings.api_four_eyes

    answer_problems(app)
    app.include_router(health_routes(client, docs=settings.api_docs))
    app.include_router(
        submission_routes(
            client, known=known, agents=agents, long_polls=long_polls, settings=settings
        )
    )
    app.include_router(session_routes(client, known))
    app.include_router(
        stream_routes(
            known=known,
            views=views,
            lists=lists,
            changes=changes,
            live=live,
            watchers=watchers,
            quotas=quotas,
            tokens=tokens,
        )
    )
    app.include_router(approval_routes(client, known, four_eyes))
    app.include_router(signal_routes(client, known, four_eyes))
    app.include_router(compensation_routes(client, known, four_eyes))
    app.include_router(tenant_routes(client))
    app.include_router(schedule_routes(client))
    app.include_router(workspace_routes(client))
    return app
