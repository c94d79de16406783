"""Sandboxes: how a tool's commands run (``ToolContext.run``), built with bubblewrap.

A command runs in namespaces of its own (``bwrap --unshare-all``): no network (but a proxy
to the hosts its tool declares, ``hands.egress``), its own process tree, the system's
programs and libraries mounted read-only, a private ``/tmp``, and one directory it may
write, the call's working directory (its workspace, when it has one). The
Hands never runs a sandboxed tool's command without that: where bubblewrap cannot make a
sandbox, the Hands refuses to start (``refuse_unless_sandboxable``).

Limits are rlimits set on bubblewrap before it starts, inherited by every process inside:
CPU seconds and address space per process, and a number of processes. The kernel counts
``RLIMIT_NPROC`` over all the processes of a user, in the sandbox or not, and never limits
host root; so a Hands running as root runs each sandbox as a user of its own
(``Sandboxes``), and a Hands running as another user shares one count among its own
processes and all its sandboxes. Wall time, output and cancellation are watched here: the
command is stopped by SIGKILL of bubblewrap, whose sandbox init then dies with it
(``--die-with-parent``) and takes every process of the sandbox's PID namespace along.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shlex
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from brainhands.hands.egress import Egress, proxy_environment
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.tools import Sandbox, SandboxDeclaration, ToolSpec

SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Mounted read-only beside ``/usr`` (or made the symlinks into it they are on the host)."""
SYSTEM_FILES = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/ssl",
)
"""What programs need of ``/etc`` (names, libraries, certificates); the rest of it, secrets
included, is not there."""
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
USERS = 1 << 16
"""How many user ids a Hands running as root gives its sandboxes, from its first one."""
TRUSTED = Sandbox()
"""The limits of a tool declared ``sandbox="none"``, whose commands run on the Hands itself:
all but the number of processes, which the kernel would count over all of the Hands' user's."""
DRAIN_SECONDS = 10.0
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class SandboxResult:
    """How a command ended. ``status`` is its exit status (128 + the signal's number when a
    signal ended it, as a shell says); ``stopped`` is None when it ended on its own, else
    why it was stopped (``timed out after 5 s``, ``output over 1 MiB``, ``cancelled``,
    ``killed: cpu time limit of 2 s``). ``stdout`` and ``stderr`` hold what it printed, up
    to the output limit."""

    status: int
    stdout: bytes
    stderr: bytes
    stopped: str | None = None
    refused: tuple[str, ...] = ()
    """``host:port`` of each host the command asked its proxy for and its tool does not
    declare (``Sandbox.hosts``): refused, and named here so that a failure says why."""

    @property
    def ok(self) -> bool:
        """It ran to its end and exited 0."""
        return self.status == 0 and self.stopped is None


@dataclass(frozen=True)
class Workdir:
    """Where commands run: the directory they may write, and the user they run as there
    (None: the Hands' own)."""

    path: Path
    user: int | None = None


class Sandboxes:
    """How this Hands makes sandboxes: with the bubblewrap program ``bwrap``, and, when the
    Hands runs as root, as users of their own, from ``first_user`` up.

    A user each, because the kernel counts a sandbox's processes against ``RLIMIT_NPROC``
    over every process of its user: sandboxes sharing a user would share one limit, and one
    fork bomb would starve the others. The ids go round ``USERS`` of them, so an id comes
    back long after its last sandbox: bubblewrap leaves the sandbox's init to the machine's
    init to reap, and until it does, that zombie still counts against its user. Two Hands
    processes on one machine need ranges apart (or their limits are shared: tighter, never
    looser)."""

    def __init__(self, bwrap: str = "bwrap", first_user: int = 2_000_000) -> None:
        self.bwrap = bwrap
        self.first_user = first_user
        self._users: set[int] = set()
        """The ids of the scratch directories that exist now."""
        self._turn = 0

    def command(
        self, argv: Sequence[str], workdir: Path, sandbox: Sandbox, gate: _Gate | None = None
    ) -> list[str]:
        """The bubblewrap command line that runs ``argv`` in ``workdir`` inside a sandbox;
        with a ``gate``, bubblewrap tells the sandbox's process id and waits at the gate
        before it starts the command."""
        line = [self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent"]
        if gate is not None:
            line += ["--info-fd", str(gate.info_w), "--block-fd", str(gate.block_r)]
        line += ["--new-session", "--ro-bind", "/usr", "/usr"]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                line += ["--symlink", os.readlink(path), path]
            else:
                line += ["--ro-bind-try", path, path]
        for path in SYSTEM_FILES:
            line += ["--ro-bind-try", path, path]
        # Mounts in order, each over the last: /tmp first, so that paths under it show.
        line += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for path in sandbox.read_only:  # declared, so a path that is missing is an error
            line += ["--ro-bind", path, path]
        line += ["--bind", str(workdir), str(workdir), "--remount-ro", "/"]
        line += ["--chdir", str(workdir), "--", *argv]
        return line

    async def run(
        self,
        argv: Sequence[str],
        workdir: Workdir,
        sandbox: Sandbox | None,
        cancel: asyncio.Event | None = None,
    ) -> SandboxResult:
        """Run ``argv`` in ``workdir`` within ``sandbox``'s limits, and say how it ended.
        ``sandbox`` None runs it on the Hands itself, under the same limits (a trusted
        tool's, ``TRUSTED``). Setting ``cancel``, or cancelling the task awaiting this, stops
        the command and every process it started."""
        if not argv:
            raise ValueError("a command needs at least a program to run")
        limits = sandbox or TRUSTED
        env = {"PATH": SANDBOX_PATH, "HOME": str(workdir.path), "LANG": "C.UTF-8"}
        egress = Egress(sandbox.hosts) if sandbox is not None and sandbox.hosts else None
        with _Gate.opened(egress is not None) as gate:
            if sandbox is None:
                command, limit = list(argv), _limiting(limits)
            else:
                command = self.command(argv, workdir.path, sandbox, gate)
                limit = _limiting(limits, workdir.user, sandboxed=True)
            if egress is not None:
                env |= proxy_environment()
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=workdir.path,
                env=env,
                start_new_session=True,  # its own group: what a trusted command is killed by
                preexec_fn=limit,
                pass_fds=gate.passed if gate else (),
            )
        output = _Output(limits.output_bytes)
        try:
            async with _served(egress, gate):
                stopped = await _watch(proc, output, limits, cancel)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
            # First: wait() returns only once the pipes are closed as well.
            await _drain_left(proc)
            await proc.wait()
        assert proc.returncode is not None
        status = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if stopped is None and status == 128 + signal.SIGXCPU:
            stopped = f"killed: cpu time limit of {limits.cpu_seconds} s"
        refused = tuple(egress.refused) if egress else ()
        return SandboxResult(status, bytes(output.stdout), bytes(output.stderr), stopped, refused)

    @contextlib.contextmanager
    def scratch(self, *, sandboxed: bool = True) -> Iterator[Workdir]:
        """A new, empty working directory, removed with all it holds on the way out. When
        ``sandboxed`` and the Hands runs as root, it belongs to a user of its own, whom the
        commands run in it become."""
        user = self._free_user() if sandboxed and os.geteuid() == 0 else None
        path = Path(tempfile.mkdtemp(prefix="brainhands-call-"))
        try:
            if user is not None:
                self._users.add(user)
                os.chown(path, user, user)
            yield Workdir(path, user)
        finally:
            shutil.rmtree(path, ignore_errors=True)
            if user is not None:
                self._users.discard(user)

    def _free_user(self) -> int:
        """The next id round the range that no scratch directory has now."""
        while True:
            user = self.first_user + self._turn % USERS
            self._turn += 1
            if user not in self._users:
                return user

    async def why_not(self, *, hosts: bool = False) -> str | None:
        """None when this machine can make a sandbox (one runs ``true``), with a proxy to
        the network when ``hosts``; else why not."""
        sandbox = Sandbox(wall_seconds=10, hosts=("localhost:1",) if hosts else ())
        with self.scratch() as workdir:
            try:
                done = await self.run(["true"], workdir, sandbox)
            except OSError as exc:
                return f"{self.bwrap} cannot be run: {exc}"
        if done.ok:
            return None
        said = done.stderr.decode(errors="replace").strip() or done.stopped
        return f"{self.bwrap} could not make a sandbox (exit status {done.status}): {said}"


@dataclass
class _Gate:
    """The two pipes bubblewrap is given for a sandbox whose proxy must be open before its
    command starts: it writes the sandbox's process id to one (``--info-fd``) and waits to
    read from the other (``--block-fd``)."""

    info_r: int
    info_w: int
    block_r: int
    block_w: int

    @property
    def passed(self) -> tuple[int, int]:
        """bubblewrap's ends."""
        return (self.info_w, self.block_r)

    @classmethod
    @contextlib.contextmanager
    def opened(cls, needed: bool) -> Iterator[_Gate | None]:
        """A gate when ``needed``; bubblewrap's ends are closed here once it has them, ours
        by ``_served``."""
        if not needed:
            yield None
            return
        gate = cls(*os.pipe(), *os.pipe())
        try:
            yield gate
        except BaseException:
            os.close(gate.info_r)
            os.close(gate.block_w)
            raise
        finally:
            os.close(gate.info_w)
            os.close(gate.block_r)


@contextlib.asynccontextmanager
async def _served(egress: Egress | None, gate: _Gate | None) -> AsyncIterator[None]:
    """With ``egress``: once bubblewrap has made the sandbox, serve its proxy in it, then
    let its command start, and serve it until the block ends."""
    if egress is None or gate is None:
        yield
        return
    try:
        pid = await _sandbox_pid(gate.info_r)
        if pid is None:  # bubblewrap failed before it made the sandbox, and says why
            yield
            return
        async with egress.serving(pid):
            os.write(gate.block_w, b"go")
            yield
    finally:
        os.close(gate.info_r)
        os.close(gate.block_w)


async def _sandbox_pid(info: int) -> int | None:
    """The process id of the sandbox's init, from what bubblewrap writes to ``--info-fd``;
    None when it closed the pipe without (it failed)."""
    said = b""
    loop = asyncio.get_running_loop()
    while chunk := await loop.run_in_executor(None, os.read, info, 4096):
        said += chunk
        with contextlib.suppress(ValueError):
            return int(json.loads(said)["child-pid"])
    return None


@dataclass(frozen=True)
class CallSandbox:
    """Where one tool call's commands run: its declaration and its working directory."""

    sandboxes: Sandboxes
    declared: Sandbox | None
    """None: the tool declared ``"none"``, and is trusted to run commands on the Hands."""
    workdir: Workdir

    async def run(self, argv: Sequence[str], cancel: asyncio.Event) -> SandboxResult:
        return await self.sandboxes.run(argv, self.workdir, self.declared, cancel)


@contextlib.contextmanager
def call_sandbox(
    sandboxes: Sandboxes, declared: SandboxDeclaration
) -> Iterator[CallSandbox | None]:
    """The sandbox of one attempt of a call of a tool that declared ``declared``, with a
    scratch working directory of its own; None for a tool that runs no command."""
    if declared is None:
        yield None
        return
    sandbox = None if declared == "none" else declared
    with sandboxes.scratch(sandboxed=sandbox is not None) as workdir:
        yield CallSandbox(sandboxes, sandbox, workdir)


async def refuse_unless_sandboxable(
    sandboxes: Sandboxes, tools: Iterable[ToolSpec], setting: str
) -> None:
    """Raise ``ConfigurationError`` when one of ``tools`` declares a sandbox and this
    machine cannot make one: such a tool is never served unsandboxed. ``setting`` names the
    variable that points at bubblewrap."""
    declared = {t.name: t.sandbox for t in tools if isinstance(t.sandbox, Sandbox)}
    if not declared:
        return
    sandboxed = sorted(declared)
    why = await sandboxes.why_not(hosts=any(s.hosts for s in declared.values()))
    if why is not None:
        raise ConfigurationError(
            f"{', '.join(sandboxed)} run commands in a sandbox, and none can be made here: "
            f"{why}. Install bubblewrap (apt install bubblewrap), allow user namespaces, or "
            f"set {setting} to its path; declare sandbox='none' only for a trusted tool"
        )


def describe(argv: Sequence[str]) -> str:
    """A command as a shell would spell it, shortened for an error message."""
    line = shlex.join(argv)
    return line if len(line) <= 80 else line[:77] + "..."


def _limiting(
    limits: Sandbox, user: int | None = None, *, sandboxed: bool = False
) -> Callable[[], None]:
    """What the child does before it becomes bubblewrap (or a trusted command): become
    ``user`` when given, then take ``limits``' rlimits, which every process it starts
    inherits; the number of processes only when ``sandboxed`` (counted in the sandbox's
    own user namespace). The user is changed first: the kernel checks a new user's
    processes against ``RLIMIT_NPROC`` at that moment, and bubblewrap must not be refused."""

    def limit() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
        # SIGXCPU at the limit (what the result names), SIGKILL a second later if caught.
        cpu = limits.cpu_seconds
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        if sandboxed:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))

    return limit


class _Output:
    """What a command printed, kept up to ``limit`` bytes of stdout and stderr together."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stdout = bytearray()
        self.stderr = bytearray()

    async def drain(self, stream: asyncio.StreamReader | None, into: bytearray) -> str | None:
        """Read ``stream`` to its end; the reason to stop the command once the output is
        over the limit (None when it never was)."""
        assert stream is not None
        while chunk := await stream.read(_CHUNK):
            room = self.limit - len(self.stdout) - len(self.stderr)
            into += chunk[: max(room, 0)]
            if len(chunk) > room:
                return f"output over {_size(self.limit)}"
        return None


async def _watch(
    proc: asyncio.subprocess.Process,
    output: _Output,
    limits: Sandbox,
    cancel: asyncio.Event | None,
) -> str | None:
    """Wait for ``proc`` to end, read what it prints, and return the reason it must be
    stopped (its output, its wall time, a cancel), or None once it ended on its own."""
    ended = asyncio.ensure_future(_ended(proc, output))
    cancelled = asyncio.ensure_future((cancel or asyncio.Event()).wait())
    try:
        await asyncio.wait(
            (ended, cancelled), timeout=limits.wall_seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        ended.cancel()
        cancelled.cancel()
        # Until they are done, their readers still wait on the pipes.
        await asyncio.gather(ended, cancelled, return_exceptions=True)
    if ended.done() and not ended.cancelled():
        return ended.result()
    if cancelled.done() and not cancelled.cancelled():
        return "cancelled"
    return f"timed out after {limits.wall_seconds:g} s"


async def _ended(proc: asyncio.subprocess.Process, output: _Output) -> str | None:
    """Once both streams are read and ``proc`` exited: None. Sooner, when what it printed
    is over the output limit: the reason."""
    readers = [
        asyncio.ensure_future(output.drain(proc.stdout, output.stdout)),
        asyncio.ensure_future(output.drain(proc.stderr, output.stderr)),
    ]
    try:
        for reader in asyncio.as_completed(readers):
            reason = await reader
            if reason is not None:
                return reason
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    await proc.wait()
    return None


async def _drain_left(proc: asyncio.subprocess.Process) -> None:
    """Read the pipes of a command that ended or was killed to their end, so that they
    close: a reader stopped early leaves its pipe full and open. Their last writers are
    the command's own processes, dying with it (a sandbox's PID namespace takes a moment
    to go on a busy machine); one that outlives it (a trusted command's process that left
    its group) is not waited for past ``DRAIN_SECONDS``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            for stream in (proc.stdout, proc.stderr):
                assert stream is not None
                while await stream.read(_CHUNK):
                    pass


def _size(n: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"
