"""The `engine:` config section."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from pipelines.typed import Strict

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # CPU flags of cores that compute bf16 natively


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's flags from /proc/cpuinfo (or the text CPUINFO); none where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    line = next((x for x in cpuinfo.splitlines() if x.startswith("flags")), "flags:")
    return frozenset(line.split(":", 1)[1].split())


def native_bf16(use_gpu: bool, cpuinfo: str | None = None) -> bool:
    """Whether this machine computes bf16 natively: on a GPU, or on a CPU with BF16_FLAGS. Where it
    does not, vLLM's CPU build and PyTorch emulate it (engine.dtype and learn.autocast `auto`)."""
    return use_gpu or bool(BF16_FLAGS & cpu_flags(cpuinfo))


class EngineConfig(Strict):
    kind: Literal["vllm", "hf", "hf_batch", "echo"] = "vllm"  # echo: benchmarks only (echo_engine.py)
    # auto: bfloat16 on GPUs and on CPUs that compute it natively (BF16_FLAGS), else float32, which
    # vLLM's CPU build runs 2.5x as fast as its emulated bf16 on an AVX2-only core (benchmarks/README.md).
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: int = 8192
    max_num_seqs: int = 64
    enforce_eager: bool = True
    # CPU build: KV-cache size in GiB (VLLM_CPU_KVCACHE_SPACE). GPU build: memory fraction.
    cpu_kvcache_gib: int = 2
    # KV-cache block in tokens; prefix caching reuses whole blocks only. None: 32 on the CPU build
    # (vLLM's 128 caches little of a memory turn), vLLM's 16 on GPU.
    block_size: int | None = Field(None, gt=0)
    # CPU build: cores kept for vLLM's scheduler process; None: 0 up to 4 cores, else 1.
    cpu_reserved_cores: int | None = Field(None, ge=0)
    # CPU build: the cores the engine's threads run on, e.g. "0" or "0-3" (VLLM_CPU_OMP_THREADS_BIND);
    # None: every core of its NUMA node. Keeps a rollout engine off the learner's cores on one node.
    cpu_cores: str | None = Field(None, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$", coerce_numbers_to_str=True)
    # GPU engines: every process that runs one (a rollout worker, a Serve replica) reserves
    # tensor_parallel_size GPUs from Ray (`num_gpus`), all on its node; vLLM must be the GPU build.
    use_gpu: bool = False
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    tensor_parallel_size: int = Field(1, gt=0)
    seed: int = 0
    # hf_batch: tokens one forward step packs (prefill chunks + decodes).
    max_batch_tokens: int = Field(2048, gt=0)

    def compute_dtype(self, cpuinfo: str | None = None) -> str:
        """The dtype the engine computes in: dtype, with auto resolved for this machine."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if native_bf16(self.use_gpu, cpuinfo) else "float32"

    @property
    def num_gpus(self) -> int:
        """GPUs a process running this engine reserves from Ray: none on CPU."""
        return self.tensor_parallel_size if self.use_gpu else 0
