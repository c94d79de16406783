"""Sessions' workspaces over HTTP: a first version from a tarball, versions listed with the
call that made each, a diff, a file and a tarball downloaded; a bad archive refused with its
reason (422), a second first version refused (409); another tenant's key sees nothing (an
empty list, 404s); the HTTP clients, async and blocking, speak the same routes. Real API
process on PostgreSQL."""

from __future__ import annotations

import asyncio
import io
import tarfile

import pytest

from brainhands.client.http import HttpClient, SyncHttpClient
from brainhands.shared.errors import DecisionRefused, InvalidRequest, NotFoundError
from brainhands.shared.store import WorkspaceAdvance
from brainhands.shared.workspace_trees import FileEntry, build_trees, from_tarball, object_hash
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FILES = {"src/app.py": b"print('hi')\n", "README.md": b"# app\n"}


def tarball(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def a_call_edits(brains: BrainHarness, key: str, files: dict[str, bytes]) -> str:
    """Commit the workspace's version 2 as a Hands does: with a call's outcome."""
    manifest = {p: FileEntry("f", object_hash(d), len(d)) for p, d in files.items()}
    root, trees = build_trees(manifest)
    await brains.store.workspaces.put(
        "acme", {**trees, **{object_hash(d): d for d in files.values()}}
    )
    intent = {"session_id": key, "task_id": "t1", "tool": "edit", "pool": "p", "arguments": {}}
    await brains.store.ledger.claim("op-edit", 1, intent=intent)
    step = WorkspaceAdvance(key, "repo", 1, root, len(files), sum(map(len, files.values())))
    await brains.store.ledger.record_outcome("op-edit", 1, status="succeeded", workspace=step)
    return "op-edit"


async def test_a_tenant_reads_its_sessions_workspaces_and_no_other_tenant_does(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    acme = await key_for(brains, "acme", "admin")
    reader = await key_for(brains, "acme", "read")
    globex = await key_for(brains, "globex", "admin")
    base = "/sessions/s1/workspaces"
    gz = {"Content-Type": "application/octet-stream"}
    async with api.http(acme) as http, api.http(reader) as read_only, api.http(globex) as other:
        made = await http.put(f"{base}/repo", content=tarball(FILES), headers=gz)
        assert made.status_code == 201, made.text
        assert made.json() == {
            "name": "repo",
            "version": 1,
            "operation_id": None,
            "files": 2,
            "bytes": 18,
            "created_at": made.json()["created_at"],
        }
        again = await http.put(f"{base}/repo", content=tarball(FILES), headers=gz)
        assert again.status_code == 409, again.text
        refused = await read_only.put(f"{base}/other", content=tarball(FILES), headers=gz)
        assert refused.status_code == 403
        for bad, reason in (
            (b"not a tarball", "not a tar archive"),
            (tarball({"../escape": b"x"}), "cannot name a file"),
        ):
            answer = await http.put(f"{base}/bad", content=bad, headers=gz)
            assert answer.status_code == 422, answer.text
            assert reason in answer.json()["detail"]

        op = await a_call_edits(brains, "acme/s1", {**FILES, "src/app.py": b"print('bye')\n"})
        versions = (await read_only.get(f"{base}/repo/versions")).json()
        assert [(v["version"], v["operation_id"]) for v in versions] == [(1, None), (2, op)]
        assert [w["version"] for w in (await read_only.get(base)).json()] == [2]
        diff = await read_only.get(f"{base}/repo/diff", params={"before": 0, "after": 2})
        assert diff.json()["paths"] == {"README.md": "added", "src/app.py": "added"}
        diff = await read_only.get(f"{base}/repo/diff", params={"before": 1, "after": 2})
        assert diff.json()["paths"] == {"src/app.py": "changed"}
        file = await read_only.get(f"{base}/repo/versions/1/files/src/app.py")
        assert (file.status_code, file.content) == (200, FILES["src/app.py"])
        assert (await read_only.get(f"{base}/repo/versions/1/files/nope")).status_code == 404
        assert (await read_only.get(f"{base}/repo/versions/9/tarball")).status_code == 404
        archive = await read_only.get(f"{base}/repo/versions/2/tarball")
        manifest, _ = from_tarball(archive.content)
        assert manifest["src/app.py"].size == len(b"print('bye')\n")

        # Another tenant's s1 is another session: it has no workspace.
        assert (await other.get(base)).json() == []
        assert (await other.get(f"{base}/repo/versions")).json() == []
        assert (await other.get(f"{base}/repo/versions/1/files/README.md")).status_code == 404

    async with HttpClient(api.url, acme) as client:
        made_by_client = await client.create_workspace("s2", "repo", tarball(FILES))
        assert (made_by_client.version, made_by_client.files) == (1, 2)
        assert await client.workspace_file("s2", "repo", 1, "src/app.py") == FILES["src/app.py"]
        assert await client.workspace_diff("s1", "repo", 1, 2) == {"src/app.py": "changed"}
        with pytest.raises(InvalidRequest, match="not a tar archive"):
            await client.create_workspace("s3", "repo", b"junk")
        with pytest.raises(DecisionRefused, match="exists"):
            await client.create_workspace("s2", "repo", tarball(FILES))
        with pytest.raises(NotFoundError):
            await client.workspace_tarball("s2", "repo", 5)

    def blocking() -> list[int]:
        with SyncHttpClient(api.url, acme) as sync:
            archive = sync.workspace_tarball("s1", "repo", 2)
            sync.create_workspace("s4", "repo", archive)
            assert sync.workspace_diff("s4", "repo", 1, 1) == {}
            return [v.version for v in sync.workspace_versions("s1", "repo")]

    assert await asyncio.to_thread(blocking) == [1, 2]
