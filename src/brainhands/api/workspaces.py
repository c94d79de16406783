"""The API's routes for sessions' workspaces (``client.workspaces``): give one its first
version from a tarball, list versions and the calls that made them, compare two, download a
file or a tarball. A key reaches its own tenant's sessions only. Reading needs ``read``;
giving a first version ``submit``, as it shapes what the session's tools work on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from brainhands.api.bodies import SessionId
from brainhands.api.guard import Guarded, caller, needs
from brainhands.client.direct import Client
from brainhands.client.workspaces import WorkspaceVersionView
from brainhands.shared.errors import ConflictError
from brainhands.shared.tenancy import session_key

WORKSPACE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
WorkspaceName = Annotated[str, Path(pattern=WORKSPACE_NAME, max_length=64)]
Version = Annotated[int, Path(ge=0, le=2**62)]
FilePath = Annotated[str, Path(min_length=1, max_length=4096)]
TARBALL = "application/gzip"


class WorkspaceVersionOut(BaseModel):
    name: str
    version: int
    operation_id: str | None
    """The call whose outcome committed it; None: given by a client."""
    files: int
    bytes: int
    created_at: float | None


class WorkspaceDiffOut(BaseModel):
    before: int
    after: int
    paths: dict[str, str]
    """Each changed path: ``added``, ``removed`` or ``changed``."""


def _out(view: WorkspaceVersionView) -> WorkspaceVersionOut:
    return WorkspaceVersionOut.model_validate(view.as_dict())


def workspace_routes(client: Client) -> APIRouter:
    """``/sessions/{id}/workspaces`` and, under ``/{name}``, its first version (``PUT``),
    ``/versions``, ``/diff``, ``/versions/{v}/files/{path}`` and ``/versions/{v}/tarball``."""
    app = APIRouter(route_class=Guarded)
    base = "/sessions/{session_id}/workspaces"

    @app.get(base, tags=["workspaces"], openapi_extra=needs("read"))
    async def workspaces(session_id: SessionId, request: Request) -> list[WorkspaceVersionOut]:
        """The latest version of each of the session's workspaces, by name."""
        key = session_key(caller(request).tenant, session_id)
        return [_out(v) for v in await client.workspaces(key)]

    @app.put(
        base + "/{name}",
        tags=["workspaces"],
        status_code=201,
        openapi_extra={
            **needs("submit"),
            "requestBody": {
                "required": True,
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                },
            },
        },
    )
    async def create(
        session_id: SessionId, name: WorkspaceName, request: Request
    ) -> WorkspaceVersionOut:
        """Give the session's workspace its first version: the files of the tar archive
        (compressed or not) in the body. 422 saying why for an archive that is none, or
        holds a path outside itself; 409 if the workspace has a version already."""
        key = session_key(caller(request).tenant, session_id)
        try:
            made = await client.create_workspace(key, name, tarball=await request.body())
        except ConflictError as exc:
            raise HTTPException(409, str(exc)) from None
        return _out(made)

    @app.get(base + "/{name}/versions", tags=["workspaces"], openapi_extra=needs("read"))
    async def versions(
        session_id: SessionId, name: WorkspaceName, request: Request
    ) -> list[WorkspaceVersionOut]:
        """Every version of the workspace, oldest first, each with the call that made it."""
        key = session_key(caller(request).tenant, session_id)
        return [_out(v) for v in await client.workspace_versions(key, name)]

    @app.get(base + "/{name}/diff", tags=["workspaces"], openapi_extra=needs("read"))
    async def diff(
        session_id: SessionId,
        name: WorkspaceName,
        request: Request,
        before: Annotated[int, Query(ge=0, le=2**62)],
        after: Annotated[int, Query(ge=0, le=2**62)],
    ) -> WorkspaceDiffOut:
        """What changed from version ``before`` to ``after``; 404 for a version it lacks."""
        key = session_key(caller(request).tenant, session_id)
        paths = await client.workspace_diff(key, name, before, after)
        return WorkspaceDiffOut(before=before, after=after, paths=paths)

    @app.get(
        base + "/{name}/versions/{version}/files/{path:path}",
        tags=["workspaces"],
        openapi_extra=needs("read"),
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}}},
    )
    async def file(
        session_id: SessionId,
        name: WorkspaceName,
        version: Version,
        path: FilePath,
        request: Request,
    ) -> Response:
        """A file's bytes at a version; 404 if it holds no such file."""
        key = session_key(caller(request).tenant, session_id)
        data = await client.workspace_file(key, name, version, path)
        return Response(data, media_type="application/octet-stream")

    @app.get(
        base + "/{name}/versions/{version}/tarball",
        tags=["workspaces"],
        openapi_extra=needs("read"),
        response_class=Response,
        responses={200: {"content": {TARBALL: {}}}},
    )
    async def tarball(
        session_id: SessionId, name: WorkspaceName, version: Version, request: Request
    ) -> Response:
        """The workspace's files at a version, as a gzipped tar archive."""
        key = session_key(caller(request).tenant, session_id)
        data = await client.workspace_tarball(key, name, version)
        disposition = f'attachment; filename="{name}-{version}.tar.gz"'
        return Response(data, media_type=TARBALL, headers={"Content-Disposition": disposition})

    return app
