"""The web console: the sessions list and a session's page, served by the API.

The pages are one static HTML shell with a little JavaScript (``console/``), no build step:
the script reads the API's event streams with the key the operator enters (kept in the
tab's session storage, sent in a header, never in a URL) and renders what they carry.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

_FILES = resources.files("brainhands.api") / "console"
_TYPES = {"console.js": "text/javascript", "console.css": "text/css"}


def mount_console(app: FastAPI) -> None:
    page = (_FILES / "console.html").read_text()

    @app.get("/console", response_class=HTMLResponse, include_in_schema=False)
    async def sessions_page() -> str:
        return page

    @app.get("/console/sessions/{session_id}", response_class=HTMLResponse, include_in_schema=False)
    async def session_page(session_id: str) -> str:
        return page

    @app.get("/console/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in _TYPES:
            return Response(status_code=404)
        return Response((_FILES / name).read_text(), media_type=_TYPES[name])
