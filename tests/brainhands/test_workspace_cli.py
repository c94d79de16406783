"""``brainhands workspace create|list|versions|diff|get|tarball`` on the embedded store, the
command's ``main`` run in this process; a bad archive and a missing option are refused
with the reason."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from brainhands.cli import main
from brainhands.shared.workspace_trees import from_tarball

pytestmark = pytest.mark.integration


def test_a_workspace_is_given_listed_compared_and_written_out(
    embedded_deployment: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    tmp_path = embedded_deployment
    archive = tmp_path / "repo.tar"
    with tarfile.open(archive, "w") as tar:
        for path, data in {"app.py": b"print(1)\n", "lib/util.py": b"x = 2\n"}.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    def run(*args: str) -> tuple[int, bytes, str]:
        code = main(["workspace", *args, "--tenant", "acme"])
        said = capsysbinary.readouterr()
        return code, said.out, said.err.decode()

    code, out, err = run("create", "s1", "repo", "--tarball", str(archive), "--json")
    assert code == 0, err
    [made] = json.loads(out)
    assert (made["version"], made["files"], made["operation_id"]) == (1, 2, None)
    code, _, err = run("create", "s1", "other", "--tarball", str(tmp_path / "missing.tar"))
    assert code == 2 and "--tarball:" in err and "missing.tar" in err
    (tmp_path / "junk.tar").write_bytes(b"junk")
    code, _, err = run("create", "s1", "junk", "--tarball", str(tmp_path / "junk.tar"))
    assert code == 2 and "not a tar archive" in err

    code, out, _ = run("list", "s1")
    assert code == 0 and out.startswith(b"repo  v1  2 files  15 bytes  ")
    assert out.rstrip().endswith(b"given by a client")
    code, out, _ = run("diff", "s1", "repo", "--before", "0", "--after", "1")
    assert (code, out) == (0, b"added    app.py\nadded    lib/util.py\n")
    code, _, err = run("diff", "s1", "repo", "--before", "0")
    assert code == 2 and "give --before and --after" in err
    code, out, _ = run("get", "s1", "repo", "--path", "lib/util.py")
    assert (code, out) == (0, b"x = 2\n")
    code, _, err = run("get", "s1", "repo", "--path", "nope.py")
    assert code != 0 and "no file 'nope.py'" in err
    code, _, err = run("tarball", "s1", "repo", "--version", "1", "--out", "v1.tar.gz")
    assert code == 0 and "bytes written to v1.tar.gz" in err
    manifest, _ = from_tarball((tmp_path / "v1.tar.gz").read_bytes())
    assert sorted(manifest) == ["app.py", "lib/util.py"]
    # Another tenant's s1 is another session.
    assert main(["workspace", "list", "s1", "--tenant", "globex"]) == 0
    assert capsysbinary.readouterr().out == b""
