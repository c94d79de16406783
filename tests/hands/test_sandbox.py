"""Sandboxed commands: real bubblewrap sandboxes, real processes, each limit reached for real.

Every command here is one a tool could run; each test checks, from the host, that what the
sandbox must stop was stopped (a file untouched, a connection never accepted, a marker no
longer written, no process left) and that the result says why.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from brainhands.hands.sandbox import Sandboxes, Workdir, refuse_unless_sandboxable
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.tools import Sandbox, declare
from tests.helpers.polling import eventually
from tests.helpers.processes import WORKDIR

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap: apt install bubblewrap"
    ),
]

SANDBOXES = Sandboxes()
PYTHON = "/usr/bin/python3"
"""The system's Python: it is in every sandbox (the tests' virtualenv is not)."""


@pytest.fixture
def scratch() -> Iterator[Workdir]:
    with SANDBOXES.scratch() as workdir:
        yield workdir


@pytest.fixture
def workdir(scratch: Workdir) -> Path:
    return scratch.path


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory that the sandbox's user can reach (pytest's ``tmp_path`` is in a
    directory of root's alone, and a Hands running as root runs its sandboxes as nobody)."""
    path = Path(tempfile.mkdtemp(prefix="brainhands-host-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def outside(host_dir: Path) -> Path:
    """A host directory a sandbox may read (declared ``read_only``), holding one file."""
    (host_dir / "kept.txt").write_text("host data\n")
    (host_dir / "kept.txt").chmod(0o666)  # even a file anyone may write stays as it is
    return host_dir


def processes_with(token: str) -> list[int]:
    """The host's processes whose command line holds ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # it ended while we looked
    return found


async def test_a_command_runs_in_its_workdir_and_says_how_it_ended(
    scratch: Workdir, workdir: Path
) -> None:
    done = await SANDBOXES.run(
        ["sh", "-c", "echo made > made.txt; echo out; echo err >&2; exit 3"], scratch, Sandbox()
    )

    assert (done.status, done.stopped, done.ok) == (3, None, False)
    assert (done.stdout, done.stderr) == (b"out\n", b"err\n")
    assert (workdir / "made.txt").read_text() == "made\n"


async def test_writes_outside_the_workdir_fail_and_the_host_is_untouched(
    scratch: Workdir, workdir: Path, outside: Path
) -> None:
    kept = outside / "kept.txt"
    script = (
        f"echo changed > {kept}; echo new > {outside}/new.txt; echo x > /usr/x; "
        f"echo x > /etc/x; echo x > {workdir}/../escaped.txt; rm -f {kept}; "
        f"echo fine > inside.txt"
    )
    done = await SANDBOXES.run(["sh", "-c", script], scratch, Sandbox(read_only=(str(outside),)))

    assert done.stderr.count(b"Read-only file system") == 5
    assert what_the_host_has(workdir, outside) == {
        "outside": ["kept.txt"],
        "kept": "host data\n",
        "system": [False, False],
        "beside the workdir": False,
        "inside": "fine\n",
    }


def what_the_host_has(workdir: Path, outside: Path) -> dict[str, object]:
    return {
        "outside": sorted(p.name for p in outside.iterdir()),
        "kept": (outside / "kept.txt").read_text(),
        "system": [Path("/usr/x").exists(), Path("/etc/x").exists()],
        "beside the workdir": (workdir.parent / "escaped.txt").exists(),
        "inside": (workdir / "inside.txt").read_text(),
    }


async def test_a_socket_to_a_port_the_host_listens_on_never_connects(scratch: Workdir) -> None:
    arrived: list[object] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        arrived.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
    async with server:
        done = await SANDBOXES.run([PYTHON, "-c", code], scratch, Sandbox())
        # The host itself reaches the port: only the sandbox is cut off.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await eventually(lambda: len(arrived) == 1, within=5, what="the host's own connection")

    assert done.status == 1 and b"ConnectionRefusedError" in done.stderr
    assert len(arrived) == 1


async def test_a_fork_bomb_is_held_to_the_process_limit_and_the_host_goes_on(
    scratch: Workdir,
) -> None:
    token = uuid.uuid4().hex
    code = (
        f"import os, time  # {token}\n"
        "forked = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        forked += 1\n"
        "except OSError as exc:\n"
        "    print(forked, exc.errno)\n"
    )
    bomb = asyncio.ensure_future(
        SANDBOXES.run([PYTHON, "-c", code], scratch, Sandbox(processes=20))
    )
    # While the bomb holds its 20 processes, the host still starts its own.
    host = await asyncio.create_subprocess_exec("true")
    assert await host.wait() == 0
    done = await bomb

    forked, errno = done.stdout.split()
    assert int(forked) < 20 and int(errno) == 11  # EAGAIN: the limit refused the next fork
    assert done.status == 0 and done.stopped is None
    assert processes_with(token) == []  # the children went down with the sandbox


async def test_the_shells_fork_bomb_meets_the_process_limit_and_leaves_nothing(
    scratch: Workdir,
) -> None:
    token = uuid.uuid4().hex
    bomb = f": {token}; bomb() {{ bomb | bomb & }}; bomb; wait"
    done = await SANDBOXES.run(["sh", "-c", bomb], scratch, Sandbox(processes=20, wall_seconds=5))

    # Each shell whose fork is refused gives up: the bomb burns out within its limit.
    assert b"Cannot fork" in done.stderr and done.stopped is None
    await eventually(lambda: processes_with(token) == [], within=5, what="the bomb's processes")


@pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes share their user's count unless root")
async def test_sandboxes_running_at_once_each_have_the_whole_process_limit() -> None:
    code = (
        "import os, time\n"
        "for _ in range(15):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "print('forked 15')\n"
    )
    with SANDBOXES.scratch() as a, SANDBOXES.scratch() as b, SANDBOXES.scratch() as c:
        assert len({a.user, b.user, c.user}) == 3
        runs = [SANDBOXES.run([PYTHON, "-c", code], w, Sandbox(processes=20)) for w in (a, b, c)]
        done = await asyncio.gather(*runs)

    # 45 children at once, each sandbox under a limit of 20: counted apart, none refused.
    assert [d.stdout for d in done] == [b"forked 15\n"] * 3, [d.stderr for d in done]


async def test_endless_output_is_stopped_at_the_output_limit(scratch: Workdir) -> None:
    started = time.monotonic()
    done = await SANDBOXES.run(["yes"], scratch, Sandbox(output_bytes=64 * 1024))

    assert done.stopped == "output over 64 KiB"
    assert len(done.stdout) == 64 * 1024 and set(done.stdout) == set(b"y\n")
    assert time.monotonic() - started < 5


async def test_a_command_past_its_wall_time_is_stopped(scratch: Workdir) -> None:
    started = time.monotonic()
    done = await SANDBOXES.run(["sleep", "60"], scratch, Sandbox(wall_seconds=1))

    assert done.stopped == "timed out after 1 s"
    assert done.status == 137  # SIGKILL
    assert time.monotonic() - started < 5


async def test_a_command_spinning_past_its_cpu_time_is_killed(scratch: Workdir) -> None:
    done = await SANDBOXES.run([PYTHON, "-c", "while True: pass"], scratch, Sandbox(cpu_seconds=1))

    assert done.stopped == "killed: cpu time limit of 1 s"
    assert done.status == 128 + 24  # SIGXCPU


async def test_memory_past_the_limit_is_refused(scratch: Workdir) -> None:
    code = "bytearray(512 << 20)"
    done = await SANDBOXES.run([PYTHON, "-c", code], scratch, Sandbox(memory_bytes=128 << 20))

    assert done.status == 1 and b"MemoryError" in done.stderr
    within = await SANDBOXES.run([PYTHON, "-c", code], scratch, Sandbox(memory_bytes=1 << 30))
    assert within.ok


def marking(token: str) -> list[str]:
    """A command whose three background processes each append to a marker file in the
    workdir every 50 ms, until they are killed."""
    loop = f"while true; do echo {token} >> mark$i; sleep 0.05; done"
    return ["sh", "-c", f"for i in 1 2 3; do ( {loop} ) & done; wait"]


def all_marking(workdir: Path) -> bool:
    return all((workdir / f"mark{i}").exists() for i in (1, 2, 3))


def marker_sizes(workdir: Path) -> list[int]:
    return [p.stat().st_size for p in sorted(workdir.glob("mark*"))]


async def markers_stop(workdir: Path) -> None:
    """The marker files stop growing: every writer is dead."""
    sizes = marker_sizes(workdir)
    assert len(sizes) == 3
    await asyncio.sleep(0.5)
    assert marker_sizes(workdir) == sizes


@pytest.mark.parametrize("how", ["cancel event", "task cancelled"])
async def test_a_cancel_kills_every_process_of_the_sandbox(
    scratch: Workdir, workdir: Path, how: str
) -> None:
    token = uuid.uuid4().hex
    cancel = asyncio.Event()
    run = asyncio.ensure_future(SANDBOXES.run(marking(token), scratch, Sandbox(), cancel))

    await eventually(lambda: all_marking(workdir), within=5, what="three writers marking")
    assert len(processes_with(token)) >= 3
    if how == "cancel event":
        cancel.set()
        assert (await run).stopped == "cancelled"
    else:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    assert processes_with(token) == []
    await markers_stop(workdir)


async def test_a_hands_killed_mid_command_leaves_no_process_of_its_sandbox() -> None:
    token = uuid.uuid4().hex
    victim = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.helpers.sandbox_victim", token,
        cwd=WORKDIR, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert victim.stdout is not None
    workdir = Path((await victim.stdout.readline()).decode().strip())
    try:
        await eventually(lambda: all_marking(workdir), within=10, what="three writers marking")
        assert len(processes_with(token)) >= 3
    finally:
        victim.kill()  # SIGKILL: no finally of its own runs, nor its scratch's removal
        await victim.wait()

    await eventually(lambda: processes_with(token) == [], within=5, what="the sandbox gone")
    await markers_stop(workdir)
    shutil.rmtree(workdir)


async def test_a_trusted_command_runs_on_the_host_and_a_cancel_kills_its_group(
    outside: Path,
) -> None:
    token = uuid.uuid4().hex
    cancel = asyncio.Event()
    run = asyncio.ensure_future(SANDBOXES.run(marking(token), Workdir(outside), None, cancel))

    await eventually(lambda: all_marking(outside), within=5, what="three writers marking")
    cancel.set()

    assert (await run).stopped == "cancelled"
    assert processes_with(token) == []
    await markers_stop(outside)


async def test_a_declaration_that_cannot_be_kept_is_refused_at_import() -> None:
    with pytest.raises(ValueError, match="must be absolute"):
        Sandbox(read_only=("venv",))

    async def run_tests(args: Sandbox, ctx: object) -> None: ...

    with pytest.raises(TypeError, match=r"a Sandbox\(\.\.\.\) or 'none', not 'bwrap'"):
        declare(
            run_tests,
            name=None,
            pool="p",
            policy="safe",
            query=None,
            timeout=1,
            retry=None,
            description=None,
            sandbox="bwrap",  # type: ignore[arg-type]
        )


def failing_bwrap(folder: Path) -> Path:
    """A program in bubblewrap's place that fails as it does where user namespaces are off."""
    wrapper = folder / "bwrap"
    wrapper.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return wrapper


async def test_a_machine_that_cannot_make_a_sandbox_refuses_sandboxed_tools(
    host_dir: Path,
) -> None:
    async def run_tests(args: Sandbox, ctx: object) -> None: ...

    sandboxed = declare(
        run_tests, name=None, pool="p", policy="safe", query=None, timeout=1, retry=None,
        description=None, sandbox=Sandbox(),
    )  # fmt: skip
    trusted = declare(
        run_tests, name="trusted", pool="p", policy="safe", query=None, timeout=1, retry=None,
        description=None, sandbox="none",
    )  # fmt: skip
    missing = Sandboxes(bwrap=str(host_dir / "no-such-bwrap"))
    failing = Sandboxes(bwrap=str(failing_bwrap(host_dir)))

    with pytest.raises(
        ConfigurationError, match=r"run_tests run commands .*no-such-bwrap.*SETTING"
    ):
        await refuse_unless_sandboxable(missing, [sandboxed, trusted], "SETTING")
    with pytest.raises(
        ConfigurationError, match=r"exit status 1\): bwrap: No permissions to creating"
    ):
        await refuse_unless_sandboxable(failing, [sandboxed], "SETTING")
    await refuse_unless_sandboxable(failing, [trusted], "SETTING")  # nothing to sandbox
    await refuse_unless_sandboxable(SANDBOXES, [sandboxed], "SETTING")  # this machine can
