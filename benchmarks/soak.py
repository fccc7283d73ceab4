"""Soak: `memagent serve` held at twice its capacity for 20 minutes, one replica killed halfway.

    nice -n 10 .venv/bin/python benchmarks/soak.py --minutes 4 --work /tmp/soak   # a check, ~12 min
    nice -n 10 .venv/bin/python benchmarks/soak.py --work /tmp/soak              # 20 minutes at 2x

The real server as a user starts it (`memagent serve`, its own local Ray, SmolLM2-135M-Instruct on
the vLLM CPU engine, 2 replicas by default so that one can be killed), fed short documents (one
128-token chunk: two turns a request) so that requests are quick and many:
  (1) capacity: a short open-loop ramp; the highest rate (requests/s) answered with no 503 and
      no backlog (its requests done within a quarter of the step after it ends);
  (2) soak: an open-loop load at `--load` x capacity (Poisson arrivals: a client that does not
      wait for answers, as real traffic does not) for `--minutes`; a batch job submitted as it
      starts; at half time one Agent replica's process tree is SIGKILLed and Serve replaces it.
Per minute: requests sent, accepted (200), refused (503, each checked for Retry-After), other
errors, p50/p99 latency of the accepted; each server process's RSS and the machine's MemAvailable.
Processes are found in `memagent serve`'s process tree by the title Ray gives each actor's process
(ray::ServeReplica:APP:DEPLOYMENT, ray::ServeController, ray::ProxyActor): joining its Ray as a
second driver would add a process to what is measured, and Ray's address auto-detection could join
another job's Ray on a shared machine.
Targets: errors only 503 with Retry-After; every accepted request answered; peak RSS of each process
within 5% of its minute-5 sample (a process born later: of its first sample a minute after birth);
every batch row in the output once. Results: benchmarks/results/soak/<date>.json and .md; last line JSON.
The machine is shared: below 4 GiB MemAvailable (before the load and each minute) the soak stops.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import MB, REPO, command_line, finish  # noqa: E402
from benchmarks.soak_report import Outcome, judge, markdown, pct, per_minute, rss_growth  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "soak"
MIN_AVAILABLE_GIB = 4.0
START_TIMEOUT_S = 900
AGENT_TITLE = "ray::ServeReplica:memagent:Agent"
SERVER_GIB = (1.0, 2.5)  # MemAvailable the server takes: GiB + GiB a replica (2 took ~5.5 here; their
# RSS add up to ~9.7 GB, since a replica's forked vLLM engine core and worker share pages)
MAX_ONGOING = 4  # a replica's requests in flight (4 more queue, then 503)


class SoakStopped(Exception):
    """The soak stops with one line (the server did not start, memory ran short)."""


def document(i: int) -> str:
    """~80 tokens: one chunk of 128, so a request is an update turn and a final turn."""
    return "The grass is green. The sky is blue. " * 6 + f"The code of box {i} is {1000 + i * 7 % 9000}. "


def body(i: int) -> dict:
    return {"question": f"What is the code of box {i}?", "document": document(i)}


def server_overrides(work: Path, replicas: int) -> list[str]:
    """Small vLLM engines (1 GiB KV cache, as tests/serve sizes them) and tight admission, so 2x
    capacity turns into 503s within seconds; no MLflow tracking (its deployment's memory is kept
    for the shared machine's other jobs; serving does not depend on it)."""
    return ["engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=1024", "engine.max_num_seqs=8",
            "agent.chunk_size=128", "agent.memory_budget=16", "agent.final_budget=16",
            f"serve.replicas={replicas}", "serve.replica_cpus=0.5", f"serve.max_ongoing_requests={MAX_ONGOING}",
            "serve.max_queued_requests=4", "serve.retry_after_s=1", "serve.shard_rows=8",
            f"serve.state_dir={work / 'state'}", f"serve.allowed_paths=[{work}]",
            "track.enabled=false"]


def start_server(work: Path, replicas: int, port: int) -> subprocess.Popen:
    """`memagent serve` in its own session; returns once /healthz answers, else stops in one line."""
    import httpx

    env = {k: v for k, v in os.environ.items() if k not in ("MEMAGENT_SERVE_TOKEN", "RAY_ADDRESS")}
    cmd = [str(REPO / ".venv" / "bin" / "memagent"), "serve", "--model", "smollm2", "--port", str(port),
           *server_overrides(work, replicas)]
    with open(work / "serve.out", "w") as out, open(work / "serve.err", "w") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = (work / "serve.err").read_text().strip().splitlines() or ["(no output)"]
            raise SoakStopped(f"memagent serve did not start (exit {proc.returncode}): {lines[-1]} "
                              f"(log: {work / 'serve.err'})")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(2)
    stop_server(proc)
    raise SoakStopped(f"memagent serve did not answer /healthz within {START_TIMEOUT_S} s (log: {work / 'serve.err'})")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM (the command stops the app and its Ray), then SIGKILL for whatever of its tree is left."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass


def label(proc) -> str | None:
    """What a process of the server is: its Ray actor title, gcs_server, raylet, another Ray
    daemon by its script; None for idle Ray workers and children counted with their parent."""
    import psutil

    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return None
    if not cmd:
        return None
    if cmd[0].startswith("ray::"):
        return None if cmd[0].startswith("ray::IDLE") else cmd[0].split()[0]
    name = Path(cmd[0]).name
    if name in ("gcs_server", "raylet"):
        return name
    script = next((Path(a).name for a in cmd[1:] if a.endswith(".py")), None)
    return f"{name} {script}" if script else None


def server_processes(driver_pid: int) -> dict[int, str]:
    """pid -> label of the server's processes: the driver, Ray's daemons and every actor (an
    actor's children, the vLLM engine core, are counted in its RSS)."""
    import psutil

    procs = {driver_pid: "driver (memagent serve)"}
    try:
        tree = psutil.Process(driver_pid).children(recursive=True)
    except psutil.Error:
        return procs
    for p in tree:
        name = label(p)
        if name is not None:
            procs[p.pid] = name
    return procs


def agent_pids(driver_pid: int) -> list[int]:
    return sorted(pid for pid, name in server_processes(driver_pid).items() if name == AGENT_TITLE)


def rss_of(pid: int, name: str) -> int:
    """An actor's tree (its engine core is a child); the driver and Ray's daemons alone (their
    children are the other processes)."""
    import psutil

    from pipelines.rollout.rss import process_rss

    if name.startswith("ray::"):
        return process_rss(pid)
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    return float("inf")


def wait_for_memory(need_gib: float, wait_s: float) -> None:
    """Before the server starts: room for it above the floor, waiting out other jobs' peaks."""
    deadline, told = time.monotonic() + wait_s, False
    while (gib := mem_available_gib()) < MIN_AVAILABLE_GIB + need_gib:
        if time.monotonic() > deadline:
            raise SoakStopped(f"MemAvailable {gib:.1f} GiB: the server needs ~{need_gib:.0f} GiB above the "
                              f"{MIN_AVAILABLE_GIB:.0f} GiB floor; none such in {wait_s:.0f} s")
        if not told:
            print(f"waiting for MemAvailable >= {MIN_AVAILABLE_GIB + need_gib:.0f} GiB (now {gib:.1f})", flush=True)
            told = True
        time.sleep(10)


def check_memory(where: str) -> float:
    gib = mem_available_gib()
    if gib < MIN_AVAILABLE_GIB:
        raise SoakStopped(f"MemAvailable {gib:.1f} GiB < {MIN_AVAILABLE_GIB:.0f} GiB {where}: stopped so that "
                          "neither the kernel nor Ray's memory monitor kills another job's workers")
    return gib


async def request(client, i: int, t0: float, out: list[Outcome]) -> None:
    sent = time.monotonic()
    try:
        r = await client.post("/v1/answer", json=body(i))
        answered = r.status_code == 200 and isinstance(r.json().get("answer"), str)
    except Exception as e:  # noqa: BLE001 - any failure to get an answer is an error, recorded
        out.append(Outcome(sent - t0, 0, time.monotonic() - sent, None, False, f"{e.__class__.__name__}: {e}"[:200]))
        return
    latency = time.monotonic() - sent
    error = None if r.status_code in (200, 503) else r.text[:200]
    out.append(Outcome(sent - t0, r.status_code, latency, r.headers.get("retry-after"), answered, error,
                       r.status_code == 503 and "unavailable" in r.text))


async def open_loop(client, rate: float, seconds: float, out: list[Outcome], t0: float,
                    stop: asyncio.Event) -> list[asyncio.Task]:
    """Send at `rate` requests/s (exponential gaps) for `seconds` or until `stop`, never waiting
    for answers."""
    rng, tasks, at = random.Random(7), [], t0
    while (at := at + rng.expovariate(rate)) < t0 + seconds and not stop.is_set():
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        tasks.append(asyncio.create_task(request(client, rng.randrange(10**6), t0, out)))
    return tasks


async def closed_loop(client, clients: int, seconds: float, out: list[Outcome], t0: float) -> None:
    """`clients` callers, each sending its next request when the last is answered, for `seconds`."""
    async def caller(k: int) -> None:
        i = k
        while time.monotonic() - t0 < seconds:
            await request(client, i, t0, out)
            i += clients

    await asyncio.gather(*(caller(k) for k in range(clients)))


async def ramp(client, step_s: float, most: int) -> tuple[float, list[dict]]:
    """Capacity: closed-loop callers doubling from 1 to `most` (what the replicas admit without
    queueing); the best rate (requests answered per second of the step) a step reached with no
    503 and no error. The ramp stops when doubling the callers adds under 10%. Closed loop, so
    that a slow engine answers at its pace instead of building a backlog that ends in 503s."""
    for k in range(max(2, most // 2)):  # warm the replicas' engines first
        (await client.post("/v1/answer", json=body(k))).raise_for_status()
    capacity, steps, clients = 0.0, [], 1
    while clients <= most:
        out: list[Outcome] = []
        t0 = time.monotonic()
        await closed_loop(client, clients, step_s, out, t0)
        rate = sum(o.status == 200 for o in out) / (time.monotonic() - t0)
        clean = all(o.status == 200 for o in out)
        steps.append({"clients": clients, "rate": round(rate, 3), "sent": len(out),
                      "refused": sum(o.status == 503 for o in out), "other_errors": sum(o.status != 200 for o in out)
                      - sum(o.status == 503 for o in out), "p50_s": pct([o.latency for o in out if o.status == 200], 0.5)})
        print(f"ramp {clients} callers: {rate:.2f} req/s answered, {len(out)} sent, p50 {steps[-1]['p50_s']} s",
              flush=True)
        if not clean:
            break
        gained = rate > 1.1 * capacity
        capacity, clients = max(capacity, rate), clients * 2
        if not gained:
            break
    if capacity == 0:
        raise SoakStopped(f"no ramp step was answered without 503s or errors (steps: {steps})")
    return capacity, steps


def write_rows(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"row-{i}", **body(i)}) + "\n")


def rows_once(output: Path, n: int) -> dict:
    """How the job's output holds its n rows: written, distinct ids, ids missing, rows with an error."""
    import pyarrow.parquet as pq

    table = pq.read_table(output) if output.exists() else None
    ids = table.column("id").to_pylist() if table is not None else []
    errors = sum(e is not None for e in table.column("error").to_pylist()) if table is not None else 0
    missing = len({f"row-{i}" for i in range(n)} - set(ids))
    return {"rows": n, "written": len(ids), "distinct": len(set(ids)), "missing": missing, "row_errors": errors,
            "once": len(ids) == len(set(ids)) == n and missing == 0}


class Monitor:
    """Each minute: RSS of every server process and MemAvailable (the soak stops below the floor);
    at `kill_at` s, SIGKILL of one Agent replica's process tree; then the seconds until Serve has
    replaced it."""

    def __init__(self, driver_pid: int, replicas: int, kill_at: float, job_url: str):
        self.driver, self.replicas, self.kill_at, self.job_url = driver_pid, replicas, kill_at, job_url
        self.samples: list[dict] = []  # {"minute", "mem_available_gib", "rss": {"label pid": bytes}}
        self.born: dict[str, float] = {}  # "label pid" -> minute first seen
        self.kill: dict = {}
        self.stopped: str | None = None  # why the load ended early (memory), else None

    def sample(self, minute: float) -> None:
        try:
            gib = check_memory(f"at minute {minute:.1f}")
        except SoakStopped as e:
            self.stopped = str(e)
            print(f"soak: {e}", flush=True)
            return
        rss = {f"{name} {pid}": rss_of(pid, name) for pid, name in server_processes(self.driver).items()}
        rss = {k: v for k, v in rss.items() if v}
        for k in rss:
            self.born.setdefault(k, minute)
        self.samples.append({"minute": round(minute, 2), "mem_available_gib": round(gib, 2), "rss": rss})
        print(f"minute {minute:.1f}: MemAvailable {gib:.1f} GiB, {len(rss)} server processes, "
              f"{sum(rss.values()) / MB:.0f} MB", flush=True)

    def kill_one(self, elapsed: float) -> None:
        import httpx
        import psutil

        victims = agent_pids(self.driver)
        if not victims:
            raise SoakStopped("no Agent replica process found to kill")
        victim = psutil.Process(victims[0])
        for p in [*victim.children(recursive=True), victim]:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        try:
            job = httpx.get(self.job_url, timeout=30).json()
        except (httpx.HTTPError, ValueError) as e:
            job = {"status": f"unknown ({e.__class__.__name__})"}
        self.kill = {"pid": victims[0], "at_s": round(elapsed, 1), "others": victims[1:], "replaced_after_s": None,
                     "job_at_kill": {k: job.get(k) for k in ("status", "done", "total")}}
        print(f"killed Agent replica pid {victims[0]} at {elapsed:.0f} s", flush=True)

    def check_replaced(self, elapsed: float) -> None:
        now = agent_pids(self.driver)
        if len(now) >= self.replicas and self.kill["pid"] not in now:
            self.kill.update(replaced_after_s=round(elapsed - self.kill["at_s"], 1), new=sorted(set(now) - set(
                self.kill["others"])))
            print(f"Serve replaced it after {self.kill['replaced_after_s']:.0f} s", flush=True)

    async def run(self, t0: float, seconds: float, stop: asyncio.Event) -> None:
        minute = 0
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= minute * 60:
                await asyncio.to_thread(self.sample, elapsed / 60)
                minute += 1
                if self.stopped:
                    stop.set()
                    return
            if not self.kill and elapsed >= self.kill_at:
                await asyncio.to_thread(self.kill_one, elapsed)
            elif self.kill and self.kill["replaced_after_s"] is None:
                await asyncio.to_thread(self.check_replaced, elapsed)
            if elapsed >= seconds and minute * 60 > seconds:
                return
            await asyncio.sleep(2)


async def job_status(client, job_id: str) -> dict:
    r = await client.get(f"/v1/jobs/{job_id}")
    return r.json() if r.status_code == 200 else {"status": f"http {r.status_code}"}


async def submit_job(client, work: Path, n: int) -> str:
    rows = work / "rows.jsonl"
    write_rows(rows, n)
    r = await client.post("/v1/jobs", json={"input": str(rows), "output": str(work / "answers")})
    if r.status_code != 202:
        raise SoakStopped(f"the batch job was refused: {r.status_code} {r.text[:200]}")
    return r.json()["job_id"]


async def wait_job(client, job_id: str, wait_s: float) -> dict:
    deadline = time.monotonic() + wait_s
    while (st := await job_status(client, job_id))["status"] not in ("done", "failed", "cancelled") \
            and time.monotonic() < deadline:
        await asyncio.sleep(2)
    return {k: st.get(k) for k in ("status", "done", "total", "errors")}


async def soak(client, driver_pid: int, args, rate: float, work: Path) -> dict:
    """The load at `rate` for args.minutes (or until memory runs short), the batch job through
    it, the kill at half time; then the load's last answers and the job's end."""
    seconds = args.minutes * 60
    job_id = await submit_job(client, work, args.batch_rows)
    monitor = Monitor(driver_pid, args.replicas, seconds / 2, f"{str(client.base_url).rstrip('/')}/v1/jobs/{job_id}")
    out: list[Outcome] = []
    t0, stop = time.monotonic(), asyncio.Event()
    watch = asyncio.create_task(monitor.run(t0, seconds, stop))
    tasks = await open_loop(client, rate, seconds, out, t0, stop)
    after_load = {k: v for k, v in (await job_status(client, job_id)).items() if k in ("status", "done", "total")}
    _, pending = await asyncio.wait(tasks, timeout=args.drain_s) if tasks else (set(), set())
    await watch
    for t in pending:
        t.cancel()
    job = after_load if monitor.stopped else await wait_job(client, job_id, args.job_wait_s)
    return {"outcomes": out, "unanswered": len(pending), "monitor": monitor, "job": job,
            "job_after_load": after_load, "batch": rows_once(work / "answers", args.batch_rows)}


def report(args, capacity: float, steps: list[dict], run: dict) -> dict:
    mon: Monitor = run["monitor"]
    outcomes: list[Outcome] = run["outcomes"]
    table = per_minute(outcomes, args.minutes)
    from_minute = args.rss_from if args.rss_from is not None else min(5, args.minutes // 4)
    growth = rss_growth(mon.samples, mon.born, from_minute)
    bad_200 = sum(o.status == 200 and not o.answered for o in outcomes)
    targets = judge(table, run["unanswered"], bad_200, growth, run["batch"])
    if mon.stopped:
        targets["ran_its_minutes"] = False
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    note = ("A check: a short run on a 2-core machine shared with a long training benchmark; its figures "
            "show that the soak works, not what the server sustains." if args.minutes < 20 else
            "2-core machine shared with a long training benchmark (load average in `load_average`).")
    res = {"date": date, "command": command_line(), "note": note, "minutes": args.minutes, "load": args.load,
           "replicas": args.replicas, "capacity_rps": round(capacity, 3), "rate_rps": round(capacity * args.load, 3),
           "ramp": steps, "per_minute": table, "unanswered": run["unanswered"], "answered_200_without_answer": bad_200,
           "errors_seen": sorted({o.error for o in outcomes if o.error})[:10], "kill": mon.kill,
           "rss_from_minute": from_minute, "rss_growth": growth, "rss_samples": mon.samples,
           "batch": run["batch"], "job": {k: run["job"].get(k) for k in ("status", "done", "total", "errors")},
           "job_after_load": run["job_after_load"], "load_average": os.getloadavg(), "stopped": mon.stopped,
           "targets": targets}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = date if args.minutes == 20 else f"{date}-{args.minutes}min"
    (RESULTS / f"{stem}.json").write_text(json.dumps(res, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))
    worst = max(growth.items(), key=lambda kv: kv[1]["growth"], default=(None, {}))
    finish({"capacity_rps": res["capacity_rps"], "rate_rps": res["rate_rps"], "minutes": args.minutes,
            "sent": len(outcomes), "accepted": sum(r["accepted"] for r in table),
            "refused": sum(r["refused"] for r in table), "other_errors": sum(r["other_errors"] for r in table),
            "p99_s_by_minute": [r["p99_s"] for r in table], "worst_rss_growth": [worst[0], worst[1].get("growth")],
            "replaced_after_s": mon.kill.get("replaced_after_s"), "batch_once": run["batch"]["once"],
            "targets": {k: "met" if v else "not met" for k, v in targets.items()},
            "stopped": mon.stopped, "results": str((RESULTS / f"{stem}.json").relative_to(REPO))})
    if mon.stopped:
        raise SoakStopped(f"{mon.stopped} (figures so far in {RESULTS / stem}.json)")
    return res


async def phases(args, url: str, driver_pid: int, work: Path) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=url, timeout=args.request_timeout_s, limits=limits) as client:
        capacity, steps = await ramp(client, args.step_s, args.replicas * MAX_ONGOING)
        rss = sum(rss_of(pid, name) for pid, name in server_processes(driver_pid).items())
        print(f"server RSS after the ramp: {rss / MB:.0f} MB", flush=True)
        check_memory("before the load phase")
        rate = capacity * args.load
        print(f"capacity {capacity:.2f} req/s; soak at {rate:.2f} req/s for {args.minutes} min", flush=True)
        if args.batch_rows is None:
            args.batch_rows = max(32, round(capacity * 60 * args.minutes * 0.4))  # outlasts the kill
        run = await soak(client, driver_pid, args, rate, work)
    return report(args, capacity, steps, run)


def main(argv: list[str]) -> dict:
    from pipelines.runtime import free_port

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=int, default=20)
    p.add_argument("--load", type=float, default=2.0, help="offered load, x the measured capacity")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--work", default="/tmp/soak", help="server state, logs, the batch job's rows and answers")
    p.add_argument("--step-s", type=float, default=30.0, help="seconds of each capacity-ramp step")
    p.add_argument("--batch-rows", type=int, help="rows of the batch job (default: 0.4 x capacity x the soak's seconds)")
    p.add_argument("--rss-from", type=float, help="minute RSS growth is judged from (default min(5, minutes/4))")
    p.add_argument("--wait-memory-s", type=float, default=1800.0,
                   help="wait this long for room for the server before it starts")
    p.add_argument("--request-timeout-s", type=float, default=600.0)
    p.add_argument("--drain-s", type=float, default=600.0, help="wait for the last accepted answers")
    p.add_argument("--job-wait-s", type=float, default=900.0, help="wait for the batch job after the load")
    args = p.parse_args(argv)
    if args.minutes < 2 or args.replicas < 2:
        raise SoakStopped("--minutes >= 2 and --replicas >= 2 (one replica is killed halfway)")
    work = Path(args.work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    for old in ("state", "answers"):  # a job with the same input and output would answer "done" at once
        shutil.rmtree(work / old, ignore_errors=True)
    wait_for_memory(SERVER_GIB[0] + SERVER_GIB[1] * args.replicas, args.wait_memory_s)
    port = free_port()
    server = start_server(work, args.replicas, port)
    try:
        return asyncio.run(phases(args, f"http://127.0.0.1:{port}", server.pid, work))
    finally:
        stop_server(server)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SoakStopped as e:
        raise SystemExit(f"soak: {e}") from None
