"""Load on the real REST service: many concurrent keep-alive clients, latency percentiles per endpoint.

Starts ``gunicorn -c service/gunicorn_conf.py service.wsgi:app`` (the production settings: gevent
workers, one per core) on a free loopback port, then for each scenario drives it with ``--clients``
closed-loop clients (each sends its next request when the last one answered) on keep-alive
connections for ``--seconds``, after ``--warmup`` seconds that are not counted (the first requests
fill each worker's caches). Scenarios:

  livez        GET /livez: the cost of the HTTP stack itself (gunicorn + Flask), the baseline
  predict      POST /v1/predict, resnet50 on h200, batch 8, fp16, cudagraph, no layers
  latency-csv  GET /v1/latency?model=resnet50&batch=1,8,32&format=csv (three predictions)
  latency-txt  GET /v1/latency?model=resnet50&batch=8&format=txt (one number)

Prints one row per scenario (requests, requests/s, p50/p90/p99/max in ms, errors by kind, the
ratios of p50, p99 and requests/s to the livez baseline measured in the same run, and the goal:
no errors anywhere, and p99 <= 50 ms for predict), then where the CPU went. Why: a spreadsheet
or NAS loop fans out many small requests, and the service must stay fast under that fan-out.

Read the numbers knowing that:
- the client runs on the same cores as the server (two here), so it takes CPU from the server;
  the CPU lines say how much, and whether the client itself was the limit;
- in a closed loop, mean latency ~= clients / throughput (Little's law), so p99 <= 50 ms at 64
  clients needs well over 64 / 0.05 = 1,280 requests/s;
- latencies are of successful (2xx) requests, measured in the client, so they include the
  client's own scheduling (with the thread client: waiting for its GIL).

Run: .venv/bin/python benchmarks/service_load.py [--clients 64] [--seconds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._server import CpuSampler, CpuUse, GunicornServer, cores, cpu_line, percentile, run_served

PREDICT_BODY = {"model": "resnet50", "device": "h200", "batch": 8, "precision": "fp16", "mode": "cudagraph",
                "layers": False}
P99_GOAL_MS = 50.0


@dataclass(frozen=True)
class Scenario:
    name: str
    method: str
    path: str
    body: bytes | None = None
    #: p99 this scenario must stay under (ms), besides answering every request with a 2xx.
    p99_goal_ms: float | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json"} if self.body is not None else {}


SCENARIOS = [
    Scenario("livez", "GET", "/livez"),
    Scenario("predict", "POST", "/v1/predict", json.dumps(PREDICT_BODY).encode(), P99_GOAL_MS),
    Scenario("latency-csv", "GET", "/v1/latency?model=resnet50&batch=1,8,32&format=csv"),
    Scenario("latency-txt", "GET", "/v1/latency?model=resnet50&batch=8&format=txt"),
]
BASELINE = "livez"


@dataclass
class ClientLog:
    """What one client saw in the measured window (requests started after the warm-up)."""

    latencies: list[float] = field(default_factory=list)  # seconds, 2xx only
    errors: Counter[str] = field(default_factory=Counter)
    connections: int = 0  # connections opened (keep-alive: ideally one per client)
    last_done: float = 0.0
    example_error: str = ""


@dataclass
class Result:
    scenario: Scenario
    clients: int
    seconds: float
    latencies_ms: list[float]
    errors: Counter[str]
    connections: int
    cpu: CpuUse
    example_error: str

    @property
    def requests(self) -> int:
        return len(self.latencies_ms) + sum(self.errors.values())

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def p(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    def goal(self) -> tuple[bool, str]:
        problems = []
        if self.errors:
            problems.append(f"{sum(self.errors.values())} errors")
        if self.scenario.p99_goal_ms is not None and not self.p(99) <= self.scenario.p99_goal_ms:
            problems.append(f"p99 {self.p(99):.1f} > {self.scenario.p99_goal_ms:.0f} ms")
        return (not problems, "yes" if not problems else "NO: " + ", ".join(problems))

    def as_dict(self, baseline: Result | None) -> dict[str, Any]:
        met, why = self.goal()
        out: dict[str, Any] = {
            "scenario": self.scenario.name, "method": self.scenario.method, "path": self.scenario.path,
            "body": self.scenario.body.decode() if self.scenario.body else None, "clients": self.clients,
            "seconds": self.seconds, "requests": self.requests, "rps": self.rps,
            "ok": len(self.latencies_ms), "errors": dict(self.errors), "example_error": self.example_error,
            "connections_opened": self.connections,
            "latency_ms": {"p50": self.p(50), "p90": self.p(90), "p99": self.p(99),
                           "max": max(self.latencies_ms, default=float("nan")),
                           "mean": sum(self.latencies_ms) / max(len(self.latencies_ms), 1)},
            "p99_goal_ms": self.scenario.p99_goal_ms, "goal_met": met, "goal": why, "cpu": self.cpu.as_dict(),
        }
        if baseline is not None:
            out["vs_baseline"] = {"p50": self.p(50) / baseline.p(50), "p99": self.p(99) / baseline.p(99),
                                  "rps": self.rps / baseline.rps}
        return out


# ------------------------------------------------------------------------------------ thread client
class _CountingConnection(http.client.HTTPConnection):
    """An HTTPConnection that counts how often it had to (re)connect."""

    def __init__(self, *args: Any, log: ClientLog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log = log

    def connect(self) -> None:
        super().connect()
        self._log.connections += 1


def _thread_client(host: str, port: int, sc: Scenario, measure_from: float, stop_at: float, timeout: float,
                   log: ClientLog) -> None:
    conn = _CountingConnection(host, port, timeout=timeout, log=log)
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                break
            counted = t0 >= measure_from
            try:
                conn.request(sc.method, sc.path, body=sc.body, headers=sc.headers)
                resp = conn.getresponse()
                resp.read()
                t1 = time.perf_counter()
                if counted:
                    if 200 <= resp.status < 300:
                        log.latencies.append(t1 - t0)
                    else:
                        log.errors[f"HTTP {resp.status}"] += 1
                        log.example_error = log.example_error or f"HTTP {resp.status}"
                    log.last_done = t1
            except Exception as exc:  # a timeout, a reset, a closed keep-alive connection ...
                conn.close()
                if counted:
                    log.errors[type(exc).__name__] += 1
                    log.example_error = log.example_error or f"{type(exc).__name__}: {exc}"
                    log.last_done = time.perf_counter()
    finally:
        conn.close()


def run_threads(host: str, port: int, sc: Scenario, clients: int, warmup: float, seconds: float,
                timeout: float, sampler: CpuSampler) -> tuple[list[ClientLog], float, CpuUse]:
    logs = [ClientLog() for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)
    times: dict[str, float] = {}  # set before the barrier opens: thread start-up does not eat the warm-up

    def target(log: ClientLog) -> None:
        barrier.wait()
        _thread_client(host, port, sc, times["measure_from"], times["stop_at"], timeout, log)

    threads = [threading.Thread(target=target, args=(log,), daemon=True) for log in logs]
    for t in threads:
        t.start()
    t_start = time.perf_counter()
    times["measure_from"] = t_start + warmup
    times["stop_at"] = t_start + warmup + seconds
    barrier.wait()
    time.sleep(max(0.0, times["measure_from"] - time.perf_counter()))
    before = sampler.snapshot()
    for t in threads:
        t.join()
    after = sampler.snapshot()
    return logs, times["measure_from"], sampler.between(before, after)


# ----------------------------------------------------------------------------------- asyncio client
async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one HTTP/1.1 response; returns (status, whether the server will close the connection)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    close = headers.get("connection", "").lower() == "close"
    if close and "content-length" not in headers:
        await reader.read()
    return status, close


async def _async_client(host: str, port: int, sc: Scenario, measure_from: float, stop_at: float,
                        timeout: float, log: ClientLog, stopping: dict[str, bool]) -> None:
    head = f"{sc.method} {sc.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    if sc.body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(sc.body)}\r\n"
    request = (head + "\r\n").encode() + (sc.body or b"")
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None  # kept alive between requests
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at or stopping["now"]:
                break
            counted = t0 >= measure_from
            try:
                if conn is None:
                    conn = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                    log.connections += 1
                reader, writer = conn
                writer.write(request)
                status, close = await asyncio.wait_for(_read_response(reader), timeout)
                t1 = time.perf_counter()
                if close:
                    writer.close()
                    conn = None
                if counted:
                    if 200 <= status < 300:
                        log.latencies.append(t1 - t0)
                    else:
                        log.errors[f"HTTP {status}"] += 1
                        log.example_error = log.example_error or f"HTTP {status}"
                    log.last_done = t1
            except Exception as exc:
                if conn is not None:
                    conn[1].close()
                conn = None
                if counted:
                    name = "TimeoutError" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
                    log.errors[name] += 1
                    log.example_error = log.example_error or f"{name}: {exc}"
                    log.last_done = time.perf_counter()
    finally:
        if conn is not None:
            conn[1].close()


def run_asyncio(host: str, port: int, sc: Scenario, clients: int, warmup: float, seconds: float,
                timeout: float, sampler: CpuSampler) -> tuple[list[ClientLog], float, CpuUse]:
    logs = [ClientLog() for _ in range(clients)]
    cpu: dict[str, Any] = {}
    stopping = {"now": False}

    async def main() -> float:
        # Ctrl-C and SIGTERM stop the clients; the flag as well as the cancellation, since
        # Python 3.11's asyncio.wait_for can swallow a cancellation that meets a finished read.
        main_task = asyncio.current_task()
        assert main_task is not None

        def interrupt() -> None:
            stopping["now"] = True
            main_task.cancel()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        t_start = time.perf_counter()
        measure_from, stop_at = t_start + warmup, t_start + warmup + seconds

        async def sample_at_start() -> None:
            await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
            cpu["before"] = sampler.snapshot()

        sampling = asyncio.create_task(sample_at_start())
        await asyncio.gather(*(_async_client(host, port, sc, measure_from, stop_at, timeout, log, stopping)
                               for log in logs))
        await sampling
        return measure_from

    # The loop resets the handlers it took when it closes: put back ours (SIGTERM -> KeyboardInterrupt).
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        measure_from = asyncio.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping["now"]:
        raise KeyboardInterrupt
    after = sampler.snapshot()
    return logs, measure_from, sampler.between(cpu["before"], after)


# ---------------------------------------------------------------------------------------- the run
def measure(server: GunicornServer, sc: Scenario, args: argparse.Namespace) -> Result:
    runner = run_asyncio if args.client == "asyncio" else run_threads
    logs, measure_from, cpu = runner(server.host, server.port, sc, args.clients, args.warmup, args.seconds,
                                     args.timeout, CpuSampler(server.process.pid if server.process else None,
                                                                    server.port))
    latencies = sorted(x * 1e3 for log in logs for x in log.latencies)
    errors: Counter[str] = Counter()
    for log in logs:
        errors.update(log.errors)
    last = max((log.last_done for log in logs), default=measure_from + args.seconds)
    example = next((log.example_error for log in logs if log.example_error), "")
    return Result(sc, args.clients, max(last - measure_from, 1e-9), latencies, errors,
                  sum(log.connections for log in logs), cpu, example)


def fmt_errors(errors: Counter[str]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in errors.most_common()) if errors else "0"


def print_table(results: list[Result], baseline: Result | None) -> None:
    head = (f"{'scenario':<12} {'requests':>8} {'req/s':>8} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} "
            f"{'max ms':>7} {'p50 x':>6} {'p99 x':>6} {'rps x':>6}  {'conns':>5}  {'errors':<14} goal met")
    print(head)
    print("-" * len(head))
    for r in results:
        ratios = ("" if baseline is None else
                  f"{r.p(50) / baseline.p(50):>6.1f} {r.p(99) / baseline.p(99):>6.1f} {r.rps / baseline.rps:>6.2f}")
        if baseline is None:
            ratios = f"{'':>6} {'':>6} {'':>6}"
        print(f"{r.scenario.name:<12} {r.requests:>8} {r.rps:>8.0f} {r.p(50):>7.1f} {r.p(90):>7.1f} {r.p(99):>7.1f} "
              f"{max(r.latencies_ms, default=float('nan')):>7.1f} {ratios}  {r.connections:>5}  "
              f"{fmt_errors(r.errors):<14} {r.goal()[1]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64, help="concurrent keep-alive clients (default 64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per scenario (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each (default 3)")
    parser.add_argument("--workers", type=int, default=cores(), help="gunicorn workers (default: the cores)")
    parser.add_argument("--threads", type=int, default=None, help="threads per worker (default: gunicorn_conf's)")
    parser.add_argument("--client", choices=("asyncio", "threads"), default="asyncio",
                        help="asyncio: one thread, raw sockets (default, the cheaper client); "
                             "threads: one http.client connection per thread")
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS),
                        help=f"comma-separated subset of {', '.join(s.name for s in SCENARIOS)}")
    parser.add_argument("--gunicorn-args", default="",
                        help="extra gunicorn options for an experiment, passed as GUNICORN_CMD_ARGS "
                             "(e.g. '--worker-connections 32')")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-request timeout in seconds")
    parser.add_argument("--ready-timeout", type=float, default=90.0, help="seconds to wait for /readyz")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    parser.add_argument("--json-samples", action="store_true", help="include every latency sample in --json")
    args = parser.parse_args()
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [w for w in wanted if w not in {s.name for s in SCENARIOS}]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}")
    scenarios = [s for s in SCENARIOS if s.name in wanted]

    results: list[Result] = []
    server = GunicornServer(workers=args.workers, threads=args.threads, ready_timeout_s=args.ready_timeout,
                            extra_env={"GUNICORN_CMD_ARGS": args.gunicorn_args} if args.gunicorn_args else {})
    t0 = time.perf_counter()

    def work() -> None:
        ready_s = time.perf_counter() - t0
        print(f"# gunicorn ready in {ready_s:.1f} s on {server.host}:{server.port}: {args.workers} gevent "
              f"workers x {args.threads or 'gunicorn_conf default (4)'} threads; "
              f"{args.clients} {args.client} clients, {args.warmup:g} s warm-up + {args.seconds:g} s "
              f"per scenario" + (f"; GUNICORN_CMD_ARGS={args.gunicorn_args!r}" if args.gunicorn_args else ""),
              flush=True)
        for sc in scenarios:
            results.append(measure(server, sc, args))
            print(f"#   {sc.name}: {results[-1].requests} requests, {fmt_errors(results[-1].errors)}",
                  file=sys.stderr, flush=True)

    run = run_served(server, work)
    if run is None:
        return 1
    if not results:
        return 130

    baseline = next((r for r in results if r.scenario.name == BASELINE), None)
    print(f"# machine: {cores()} cores, shared by the client and the server; x = ratio to {BASELINE} "
          f"(the HTTP stack alone) measured in this run; latencies of 2xx answers, in the client")
    print_table(results, baseline)
    print()
    print("CPU during each measured window (in cores; client = this benchmark's process):")
    for r in results:
        print(f"  {r.scenario.name:<12} {cpu_line(r.cpu)}")
        print(f"  {'':<12} -> {r.cpu.verdict()}")
    print("  client CPU per request: " + ", ".join(
        f"{r.scenario.name} {r.cpu.client * r.seconds / max(r.requests, 1) * 1e6:.0f} us" for r in results))
    for r in results:
        if r.example_error:
            print(f"  first error in {r.scenario.name}: {r.example_error}")
    if any(r.connections > r.clients for r in results):
        print("  note: conns > clients means keep-alive connections were closed and reopened during the window")
    print(f"  Little's law: {args.clients} closed-loop clients at p99 <= {P99_GOAL_MS:.0f} ms need more than "
          f"{args.clients / (P99_GOAL_MS / 1e3):,.0f} requests/s")
    run.print_log_summary()
    if args.json:
        data = {"clients": args.clients, "client": args.client, "seconds": args.seconds, "warmup": args.warmup,
                "workers": args.workers, "threads": args.threads, "cores": cores(),
                "baseline": BASELINE, "server_log": run.findings,
                "scenarios": [r.as_dict(baseline if r is not baseline else None) for r in results]}
        if args.json_samples:
            for entry, r in zip(data["scenarios"], results):
                entry["latencies_ms"] = r.latencies_ms
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    return 130 if run.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
