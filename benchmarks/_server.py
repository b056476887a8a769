"""Shared by the service benchmarks: run the real gunicorn server, and account for CPU time.

Not a benchmark itself. ``GunicornServer`` starts ``gunicorn -c service/gunicorn_conf.py
service.wsgi:app`` on a free loopback port in its own session, waits for ``/readyz``, and always
stops it (SIGTERM, then SIGKILL to its process group), also on Ctrl-C or SIGTERM. ``CpuSampler``
reads /proc so a run can say how the cores were split between the benchmark's own client, the
server's processes (per worker) and anything else on the machine: on a two-core machine the
client competes with the server it measures, and the numbers mean little without that split.
``baseline_checkout`` puts another git revision of the code in a temporary worktree, and
``code_env`` makes a server started from there import that revision instead of the installed
(editable) working tree, so one run can measure the code before and after a change.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cores() -> int:
    """Cores this process may run on (what gunicorn_conf.py defaults its workers to)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gunicorn_executable() -> str:
    """The gunicorn beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "gunicorn"
    if beside.exists():
        return str(beside)
    found = shutil.which("gunicorn")
    if not found:
        raise SystemExit("gunicorn not found: run with the project's venv (.venv/bin/python)")
    return found


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile (0..100) of an ascending list, linearly interpolated; NaN if empty."""
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# ---------------------------------------------------------------------------------------- CPU time
def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds used) of a process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()  # fields after the command name, from 'state' on
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / CLOCK_TICKS


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat and stat[0] == pid:
                out.append(int(entry))
    return out


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user time
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


def connections_per_process(pids: list[int], port: int) -> dict[int, int]:
    """Established TCP connections to ``port`` that each process holds (from /proc/net/tcp)."""
    inodes = set()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return {}
    for line in lines:
        parts = line.split()
        if int(parts[1].split(":")[1], 16) == port and parts[3] == "01":
            inodes.add(parts[9])
    out = {}
    for pid in pids:
        count = 0
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    count += 1
        except OSError:
            continue
        out[pid] = count
    return out


@dataclass
class CpuSnapshot:
    wall: float
    client: float
    server: dict[int, float]
    machine_busy: float
    machine_total: float
    connections: dict[int, int] = field(default_factory=dict)


@dataclass
class CpuUse:
    """CPU used over an interval, in cores (1.0 = one core busy the whole interval)."""

    wall_s: float
    cores: int
    client: float
    server: float
    workers: dict[int, float]
    other: float
    idle: float
    #: established client connections each worker held when the interval began.
    worker_connections: dict[int, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s, "cores": self.cores, "client_cores": self.client,
                "server_cores": self.server, "worker_cores": {str(k): v for k, v in self.workers.items()},
                "worker_connections": {str(k): v for k, v in self.worker_connections.items()},
                "other_cores": self.other, "idle_cores": self.idle,
                "client_share_of_busy": self.client / max(self.client + self.server + self.other, 1e-9)}

    def verdict(self) -> str:
        """Which side limits the run, as far as CPU time can tell."""
        busy = self.client + self.server + self.other
        share = self.client / max(busy, 1e-9)
        if self.client > 0.85:
            return f"client-bound: the client's process used {self.client:.2f} cores (its GIL allows one)"
        if self.idle < 0.1 * self.cores:
            return (f"CPU-bound: the {self.cores} cores were busy; the client took {share:.0%} of that, "
                    "the rest of the CPU went to the server and other processes")
        return (f"not CPU-bound ({self.idle:.2f} of {self.cores} cores idle): the limit is concurrency or "
                "waiting (workers x threads, locks, sockets)")


class CpuSampler:
    """CPU seconds of this process, of the server (master and every worker) and of the machine."""

    def __init__(self, server_pid: int | None, port: int = 0) -> None:
        self.server_pid = server_pid
        self.port = port

    def snapshot(self) -> CpuSnapshot:
        server: dict[int, float] = {}
        connections: dict[int, int] = {}
        if self.server_pid is not None:
            workers = _children(self.server_pid)
            for pid in [self.server_pid, *workers]:
                stat = _proc_stat(pid)
                if stat:
                    server[pid] = stat[1]
            if self.port:
                connections = connections_per_process(workers, self.port)
        busy, total = _machine_busy()
        return CpuSnapshot(time.perf_counter(), time.process_time(), server, busy, total, connections)

    def between(self, a: CpuSnapshot, b: CpuSnapshot) -> CpuUse:
        wall = max(b.wall - a.wall, 1e-9)
        client = (b.client - a.client) / wall
        per_pid = {pid: (t - a.server.get(pid, 0.0)) / wall for pid, t in b.server.items()}
        server = sum(per_pid.values())
        workers = {pid: v for pid, v in per_pid.items() if pid != self.server_pid}
        n = cores()
        # /proc/stat covers every core of the machine, which may be more than this process may use.
        machine_cores = max(n, round((b.machine_total - a.machine_total) / wall))
        busy = (b.machine_busy - a.machine_busy) / wall
        other = max(0.0, busy - client - server)
        idle = max(0.0, machine_cores - busy)
        return CpuUse(wall, machine_cores, client, server, workers, other, idle, dict(a.connections))


def cpu_line(use: CpuUse) -> str:
    workers = " + ".join(f"{v:.2f}" for _, v in sorted(use.workers.items()))
    conns = " + ".join(str(use.worker_connections.get(pid, 0)) for pid in sorted(use.workers))
    return (f"client {use.client:.2f}, server {use.server:.2f} (workers {workers or '-'}; their connections "
            f"{conns or '-'}), other {use.other:.2f}, idle {use.idle:.2f} of {use.cores} cores")


# ----------------------------------------------------------------------------------------- server
@dataclass
class GunicornServer:
    """The real server on a free loopback port; use as a context manager."""

    workers: int = field(default_factory=cores)
    threads: int | None = None
    ready_timeout_s: float = 60.0
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    #: where the server runs and imports its code from: this checkout, or a baseline worktree
    #: (then ``extra_env`` should come from ``code_env``)
    root: Path = REPO

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def start(self) -> None:
        self.port = self.port or free_port()
        env = dict(os.environ)
        env.update({"LATPRED_BIND": f"{self.host}:{self.port}", "LATPRED_ACCESS_LOG": "",
                    "LATPRED_WORKERS": str(self.workers)})
        if self.threads is not None:
            env["LATPRED_THREADS"] = str(self.threads)
        env.update(self.extra_env)
        fd, name = tempfile.mkstemp(prefix="latpred-bench-gunicorn-", suffix=".log")
        self.log_path = Path(name)
        with os.fdopen(fd, "wb") as log:
            # Its own session: Ctrl-C in the terminal reaches only us, and we stop it in order.
            self.process = subprocess.Popen(
                [gunicorn_executable(), "-c", "service/gunicorn_conf.py", "service.wsgi:app"],
                cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode} before it was ready:\n"
                                   + self.log_tail())
            try:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
                try:
                    detail = str(json.loads(body).get("detail", ""))
                except (ValueError, AttributeError):
                    detail = ""
                if detail and "loading" not in detail:  # loaded, and failed: waiting will not help
                    raise RuntimeError(f"gunicorn answers /readyz {resp.status}: {detail}\n" + self.log_tail())
            except OSError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn was not ready within {self.ready_timeout_s:.0f} s (last: {last}):\n"
                           + self.log_tail())

    def stop(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.terminate()  # gunicorn: graceful shutdown of the workers
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the master and its workers
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_findings(self) -> dict[str, Any]:
        """What in the server's log says something went wrong: errors, tracebacks, restarts."""
        text = self.log_text()
        boots = len(re.findall(r"Booting worker with pid", text))
        findings: dict[str, Any] = {
            "error_lines": len(re.findall(r"\[ERROR\]", text)),
            "tracebacks": text.count("Traceback (most recent call last)"),
            "worker_timeouts": text.count("WORKER TIMEOUT"),
            "worker_restarts": max(0, boots - self.workers),
            "warning_lines": len(re.findall(r"\[WARNING\]", text)),
        }
        findings["examples"] = [line for line in text.splitlines()
                                if re.search(r"\[ERROR\]|\[WARNING\]|WORKER TIMEOUT|Error:", line)][:8]
        return findings

    def __enter__(self) -> GunicornServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A SIGTERM to the benchmark unwinds like Ctrl-C, so the server is still stopped."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def keep_log(server: GunicornServer, findings: dict[str, Any]) -> str:
    """Delete the server's log unless it says something went wrong; returns where it is, or ''."""
    bad = any(findings[k] for k in ("error_lines", "tracebacks", "worker_timeouts", "worker_restarts"))
    if server.log_path and not bad:
        server.log_path.unlink(missing_ok=True)
        return ""
    return str(server.log_path or "")


@dataclass
class ServedRun:
    """How a run against the server ended, and what its log said."""

    interrupted: bool
    findings: dict[str, Any]
    kept_log: str

    def print_log_summary(self) -> None:
        """One line on the server's log (and the lines that made it suspicious)."""
        issues = {k: v for k, v in self.findings.items() if k != "examples" and v}
        print(f"server log: {issues or 'no errors, tracebacks, timeouts or worker restarts'}"
              + (f" (kept at {self.kept_log})" if self.kept_log else ""))
        for line in self.findings["examples"]:
            print(f"  | {line}")


def run_served(server: GunicornServer, work: Callable[[], None]) -> ServedRun | None:
    """Start ``server``, run ``work``, stop it (also on Ctrl-C or SIGTERM), and read its log.

    None if the server did not get ready or a run failed: the reason and the log's path are
    printed then."""
    runs = run_served_all([server], work)
    return None if runs is None else runs[0]


def run_served_all(servers: list[GunicornServer], work: Callable[[], None]) -> list[ServedRun] | None:
    """``run_served`` for several servers up at once (``work`` drives them in turn), in order."""
    interrupted = False
    starting: GunicornServer | None = None
    with sigterm_as_interrupt():
        try:
            with ExitStack() as stack:
                for starting in servers:
                    stack.enter_context(starting)
                starting = None
                work()
        except KeyboardInterrupt:
            print("interrupted: server stopped" if len(servers) == 1 else "interrupted: servers stopped",
                  file=sys.stderr)
            interrupted = True
        except RuntimeError as exc:
            failed = [starting] if starting else servers  # one that did not get ready, or all of them
            for other in servers:
                if not any(other is f for f in failed) and other.log_path:
                    other.log_path.unlink(missing_ok=True)
            logs = ", ".join(str(s.log_path) for s in failed if s.log_path)
            print(f"error: {exc}\nserver log: {logs}", file=sys.stderr)
            return None
        runs = []
        for server in servers:
            findings = server.log_findings()
            runs.append(ServedRun(interrupted, findings, keep_log(server, findings)))
        return runs


# ------------------------------------------------------------------------------ a baseline revision
def _git(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


@dataclass(frozen=True)
class Checkout:
    """A revision of the code checked out in a worktree of its own."""

    rev: str  # as given (HEAD, main~3, a tag ...)
    commit: str  # its full hash
    subject: str  # its commit message's first line
    root: Path

    @property
    def label(self) -> str:
        return f"{self.rev} ({self.commit[:10]})" if not self.commit.startswith(self.rev) else self.commit[:10]


def working_tree_label() -> str:
    """This checkout as the code it runs: its commit, and whether files differ from it."""
    commit = _git("rev-parse", "--short=10", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return f"working tree ({commit}{' + changes' if dirty else ''})"


@contextmanager
def baseline_checkout(rev: str) -> Iterator[Checkout]:
    """``rev`` checked out (``git worktree add --detach``) in a new temporary folder outside the
    repository; the worktree and the folder are removed at the end, also on an error, Ctrl-C or
    SIGTERM (inside ``sigterm_as_interrupt``)."""
    commit = _git("rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}")
    subject = _git("log", "-1", "--format=%s", commit)
    parent = Path(tempfile.mkdtemp(prefix="latpred-bench-baseline-"))
    root = parent / "code"
    added = False
    try:
        _git("worktree", "add", "--detach", str(root), commit)
        added = True
        yield Checkout(rev, commit, subject, root)
    finally:
        if added or root.exists():  # an interrupted `git worktree add` may have begun one
            try:
                _git("worktree", "remove", "--force", str(root))
            except RuntimeError as exc:
                print(f"warning: {exc}; its folder is deleted below, `git worktree prune` forgets it",
                      file=sys.stderr)
        shutil.rmtree(parent, ignore_errors=True)


def code_env(root: Path) -> dict[str, str]:
    """Environment that makes a Python started in ``root`` import latpred's packages from there:
    ``root`` first on PYTHONPATH. The venv's editable install finds the working tree through a
    finder that sys.meta_path asks after the path-based one, so PYTHONPATH wins over it."""
    rest = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(root) + (os.pathsep + rest if rest else "")}


PACKAGES = ("predictor", "service", "training", "collectors")


def imported_from(root: Path, env: dict[str, str], app_module: str = "service.app") -> dict[str, str]:
    """Where a Python run as the server runs (this venv, cwd ``root``, ``env`` added) imports
    latpred's packages from, after importing them and ``app_module`` (what ``service.wsgi``
    imports, without building the app): each package's ``__file__``. RuntimeError unless every
    latpred module it loaded comes from inside ``root``."""
    script = ("import importlib, json, sys\n"
              f"for name in {[*PACKAGES, app_module]!r}: importlib.import_module(name)\n"
              f"mods = {{n: getattr(m, '__file__', None) or '' for n, m in list(sys.modules.items())\n"
              f"        if n.split('.')[0] in {PACKAGES!r}}}\n"
              "print(json.dumps(mods))")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"could not import the code in {root}: {done.stderr.strip()[-800:]}")
    modules: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = {n: f for n, f in modules.items() if not Path(f).resolve().is_relative_to(root.resolve())}
    if wrong:
        raise RuntimeError(f"a Python started in {root} imports these from elsewhere: {wrong}")
    return {p: modules[p] for p in PACKAGES}
