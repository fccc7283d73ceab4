"""Resident memory of a process tree; no heavy imports, so benchmarks can use it without Ray."""

from __future__ import annotations


def process_rss(pid: int) -> int:
    """RSS of a process and its children (the vLLM engine core runs in a child process)."""
    import psutil

    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total
