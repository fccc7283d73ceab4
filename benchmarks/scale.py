"""Batch QA plumbing at scale: `memagent batch --runner data` over N small documents, model removed.

    nice -n 10 .venv/bin/python benchmarks/scale.py --quick                       # 10K documents
    nice -n 10 .venv/bin/python benchmarks/scale.py --docs 100000 --work /tmp/scale-100k
    nice -n 10 .venv/bin/python benchmarks/scale.py --docs 1000000 --work /tmp/scale-1m   # restartable
    ... --s3    # input and output on a SeaweedFS started here (infra/seaweedfs.py), under --work

The engine is engine.kind=echo (pipelines/engine/echo_engine.py: the tokenizer and the agent loop
run, every turn answers at once), so what is measured is everything but the model: planning the
input into shards, Ray Data's actors, the loops over every chunk, writing the output, the job state.
One job, run as a user runs it: the batch command is SIGKILLed with its whole process tree (its
local Ray too) once about half the documents are written, then the same command runs again. It must
redo no shard written before the kill (each keeps its size and modification time) and write every
row once (the output's ids counted: N rows, N distinct, each of the input's). Measured on the way:
  - peak RSS of the driver (the command's process) and of the largest actor, up to N/10 documents and
    over the whole job (the rerun's driver plans all N and recounts the finished half): growth;
  - plumbing ms per document: the job's own answering seconds (both runs) over N;
  - shards in flight: set, not measured (serve.replicas actors x serve.shards_in_flight each);
  - `memagent plan`'s hours for the same N documents on the real model, here and on the paper's GPUs.
With --work, an interrupted benchmark restarts where it stopped (documents written, the kill done).
Figures go to benchmarks/results/scale/; last line, JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import MB, REPO, finish  # noqa: E402

RESULTS = REPO / "benchmarks/results/scale"
FILE_ROWS = 100_000  # documents per input file
FILLER = "The sky is blue and the grass is green. "
ACTORS, AT_ONCE = 2, 2  # one actor a core here, each with two shards in flight
SETTINGS = ["engine.kind=echo", f"serve.replicas={ACTORS}", "serve.replica_cpus=1", "serve.shard_rows=500",
            f"serve.shards_in_flight={AT_ONCE}", "serve.max_ongoing_requests=64"]


def document(i: int) -> dict:
    """About 70 tokens: one chunk, so two turns of the loop (memory, answer)."""
    return {"id": f"d{i}", "question": f"What is the code of box {i}?",
            "document": FILLER * 3 + f"The code of box {i} is {(i * 7919) % 9000 + 1000}. " + FILLER * 2}


def write_documents(uri: str, n: int) -> None:
    """N documents as jsonl files of FILE_ROWS, streamed; a file already there (whole: written
    aside locally, an S3 object appears complete) is not written again."""
    from pipelines.storage import resolve, written

    fs, root = resolve(uri)
    fs.create_dir(root, recursive=True)
    for f, start in enumerate(range(0, n, FILE_ROWS)):
        path = f"{root}/docs-{f:05d}.jsonl"
        if fs.get_file_info(path).size:
            continue
        with written(fs, path) as target, fs.open_output_stream(target) as out:
            for i in range(start, min(n, start + FILE_ROWS)):
                out.write((json.dumps(document(i)) + "\n").encode())


@dataclass
class Sample:
    t: float
    done: int
    driver: int  # bytes
    actor: int  # the largest actor's bytes


@dataclass
class Run:
    """One start of the batch command, watched: RSS and the job's progress every second."""

    cmd: list[str]
    env: dict
    kill_at: int | None = None  # SIGKILL the tree once this many documents are done
    samples: list[Sample] = field(default_factory=list)

    def go(self, output: str) -> int:
        proc = subprocess.Popen(self.cmd, cwd=REPO, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(proc, output, stop), daemon=True)
        watcher.start()
        _, err = proc.communicate()
        stop.set()
        watcher.join()
        killed = self.kill_at is not None and proc.returncode == -signal.SIGKILL
        if proc.returncode != 0 and not killed:
            raise SystemExit(f"batch failed ({proc.returncode}): {err[-2000:]}")
        return proc.returncode

    def _watch(self, proc: subprocess.Popen, output: str, stop: threading.Event) -> None:
        from pipelines.serve.jobstore import JobStore

        start, store = time.monotonic(), JobStore()
        while not stop.wait(1.0):
            try:
                state = store.load(output)
            except Exception:  # noqa: BLE001 - a state being rewritten: read it next time
                continue
            done = state.done if state else 0
            self.samples.append(Sample(time.monotonic() - start, done, *tree_rss(proc.pid)))
            if self.kill_at is not None and done >= self.kill_at:
                kill_tree(proc.pid)
                return


def tree_rss(pid: int) -> tuple[int, int]:
    """(the driver's RSS, the largest Ray Data actor's: a process titled ...ShardAnswerer...)."""
    import psutil

    try:
        driver = psutil.Process(pid)
        rss, kids = driver.memory_info().rss, driver.children(recursive=True)
    except psutil.Error:
        return 0, 0
    actor = 0
    for p in kids:
        try:
            if "ShardAnswerer" in " ".join(p.cmdline()):
                actor = max(actor, p.memory_info().rss)
        except psutil.Error:
            pass
    return rss, actor


def kill_tree(pid: int) -> None:
    """SIGKILL the command and every process under it (its local Ray: GCS, raylet, workers), leaves first."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True)[::-1], root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=30)


def shard_files(output: str) -> dict[str, tuple[int, int]]:
    """Each written shard's (size, modification time in ns)."""
    import pyarrow.fs as pafs

    from pipelines.serve.jobs import SHARD
    from pipelines.storage import resolve

    fs, path = resolve(output)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return {i.base_name: (i.size, i.mtime_ns) for i in infos if SHARD.match(i.base_name)}


def output_check(output: str, n: int) -> dict:
    """Rows, distinct ids, whether they are exactly the input's, and errors."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.storage import resolve

    fs, path = resolve(output)
    ids, errors = [], 0
    for name in sorted(shard_files(output)):
        t = pq.read_table(f"{path}/{name}", columns=["id", "error"], filesystem=fs)
        ids.append(t["id"])
        errors += t.num_rows - t["error"].null_count
    got = pa.chunked_array([c for a in ids for c in a.chunks], pa.string())
    expected = pa.array([f"d{i}" for i in range(n)])
    distinct = pc.count_distinct(got).as_py()
    exact = distinct == n and pc.all(pc.is_in(expected, value_set=got)).as_py()
    return {"rows": len(got), "distinct": distinct, "exact": bool(exact), "errors": errors}


def peaks(samples: list[Sample], upto: int | None = None) -> tuple[int, int]:
    chosen = [s for s in samples if upto is None or s.done <= upto] or samples
    return max(s.driver for s in chosen), max(s.actor for s in chosen)


def plan_hours(n: int) -> dict:
    """`memagent plan`'s hours for N documents of 256 tokens (the shortest it costs; ours are ~70), here (CPU, SmolLM2) and
    on the 7B recipe's cluster (H100s)."""
    out = {}
    for name, config in [("here_smollm2_cpu", "local"), ("qwen2.5_7b_h100", "cluster-qwen2.5-7b")]:
        proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "--config", config, "plan", "--docs", str(n),
                               "--doc-tokens", "256", "--json"], cwd=REPO, capture_output=True, text=True)
        b = json.loads(proc.stdout)["batch"]
        out[name] = {"hours": round(b["hours"], 1), "accelerator_hours": round(b["accelerator_hours"], 1)}
    return out


def killed_run(cmd: list[str], output: str, n: int, ledger: Path) -> dict:
    """The first start, SIGKILLed at about N/2 documents; what it left, kept in the ledger so that a
    restarted benchmark goes on from the rerun."""
    from pipelines.serve.jobstore import JobStore

    saved = json.loads(ledger.read_text()) if ledger.exists() else {}
    if "killed" not in saved:
        first = Run(cmd, dict(os.environ), kill_at=n // 2)
        start = time.perf_counter()
        code = first.go(output)
        st = JobStore().load(output)
        saved["killed"] = {"returncode": code, "done": st.done, "run_done": st.run_done, "run_seconds": st.run_seconds,
                           "wall_s": time.perf_counter() - start, "shards": shard_files(output),
                           "samples": [asdict(s) for s in first.samples]}
        ledger.write_text(json.dumps(saved))
    return saved["killed"]


def measure(n: int, work: Path, root: str) -> dict:
    from pipelines.serve.jobstore import JobStore

    docs, output = f"{root}/docs", f"{root}/out"
    write_documents(docs, n)
    cmd = [sys.executable, "-m", "pipelines.cli", "batch", "--runner", "data", "--input", docs, "--output", output,
           *SETTINGS, f"track.tracking_uri=sqlite:///{work / 'mlflow.db'}"]
    killed = killed_run(cmd, output, n, work / "scale.json")
    rerun, start = Run(cmd, dict(os.environ)), time.perf_counter()
    rerun.go(output)
    wall = time.perf_counter() - start
    st, after, check = JobStore().load(output), shard_files(output), output_check(output, n)
    redone = sum(tuple(after.get(k, ())) != tuple(v) for k, v in killed["shards"].items())
    first = [Sample(**s) for s in killed["samples"]]
    seconds = killed["run_seconds"] + st.run_seconds
    (d10, a10), (dn, an) = peaks(first, n // 10), peaks(first + rerun.samples)
    return {"documents": n, "driver_rss_mb": [round(d10 / MB), round(dn / MB)], "actor_rss_mb": [round(a10 / MB),
            round(an / MB)], "driver_rss_growth": round(dn / d10 - 1, 3), "actor_rss_growth": round(an / a10 - 1, 3),
            "ms_per_doc": round(1000 * seconds / (killed["run_done"] + st.run_done), 3),
            "shards_in_flight": ACTORS * AT_ONCE,
            "killed_at": killed["done"], "shards_before_kill": len(killed["shards"]), "shards": len(after),
            "redone_shards": redone, "rows": check["rows"], "distinct_ids": check["distinct"], "errors": check["errors"],
            "rows_written_once": check["exact"] and check["rows"] == n, "status": str(st.status),
            "wall_s": [round(killed["wall_s"]), round(wall)]}


def start_s3(work: Path):
    """A SeaweedFS under the work folder (its data kept for a restart), its env set for the commands."""
    from infra.seaweedfs import SeaweedFS

    server = SeaweedFS(work / "seaweedfs").start()
    os.environ.update(server.env())
    server.create_bucket("scale")
    return server


def report(f: dict, where: str) -> None:
    n = f["documents"]
    print(f"{n:,} documents ({where}), engine.kind=echo, {' '.join(SETTINGS[1:])}")
    print(f"driver peak RSS: {f['driver_rss_mb'][0]} MB at {n // 10:,}, {f['driver_rss_mb'][1]} MB at {n:,} "
          f"({f['driver_rss_growth']:+.1%}); largest actor: {f['actor_rss_mb'][0]} MB, {f['actor_rss_mb'][1]} MB "
          f"({f['actor_rss_growth']:+.1%})")
    print(f"plumbing: {f['ms_per_doc']:.2f} ms a document ({f['shards_in_flight']} shards in flight: {ACTORS} actors x "
          f"{AT_ONCE}); command walls {f['wall_s'][0]} s (killed) + {f['wall_s'][1]} s (rerun), start-ups included")
    print(f"SIGKILL at {f['killed_at']:,} documents ({f['shards_before_kill']} shards written); the rerun redid "
          f"{f['redone_shards']}; {f['rows']:,} rows, {f['distinct_ids']:,} distinct ids, each of the input's once: "
          f"{f['rows_written_once']}; {f['errors']} errors")
    for k, v in f["plan"].items():
        print(f"memagent plan, the same {n:,} documents on the real model ({k}): {v['hours']:,} h")


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="10,000 documents: a plumbing check")
    p.add_argument("--docs", type=int, default=1_000_000)
    p.add_argument("--s3", action="store_true", help="input and output on a SeaweedFS started here")
    p.add_argument("--work", help="a folder kept between starts, to restart (default: a new temporary one)")
    a = p.parse_args(argv)
    n = 10_000 if a.quick else a.docs
    work = Path(a.work or tempfile.mkdtemp(prefix="scale-bench-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    server = start_s3(work) if a.s3 else None
    try:
        figures = measure(n, work, "s3://scale" if a.s3 else str(work))
    finally:
        if server is not None:
            server.stop()
    figures["plan"] = plan_hours(n)
    report(figures, "SeaweedFS S3" if a.s3 else "local files")
    figures["rss_growth"] = max(figures["driver_rss_growth"], figures["actor_rss_growth"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{n}{'-s3' if a.s3 else ''}.json").write_text(json.dumps(figures, indent=1) + "\n")
    finish({k: figures[k] for k in ("documents", "rss_growth", "ms_per_doc", "redone_shards", "rows_written_once",
                                    "driver_rss_growth", "actor_rss_growth", "shards_in_flight")})
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
