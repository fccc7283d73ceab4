"""Resident memory of a process tree; no heavy imports, so benchmarks can use it without Ray."""

from __future__ import annotations


def process_rss(pid: int) -> int:
    """RSS of a process and its children (the vLLM engine core runs in a child process);
    processes that have exited count as 0."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total
