"""What `memagent plan` knows about hardware and models: a small table of accelerators (peak
dense bf16 FLOP/s, memory bandwidth, and the utilisation assumed of each) with this machine's
CPU worked out from its cores, clock and vector units; and the shapes of the models the
presets name. Peaks are the vendors' dense (no sparsity) bf16 figures; utilisations are
assumptions, printed with every plan, not measurements."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from pipelines.engine.config import BF16_FLAGS, cpu_flags
from pipelines.errors import UserError


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float  # dense bf16 FLOP/s of one unit (a GPU, or one CPU core)
    mem_bw: float  # bytes/s of one unit
    unit: str = "GPU"
    # Assumed fractions of peak: prefill and training are compute-bound matmuls (MFU); decode
    # streams the weights and the KV cache (fraction of the memory bandwidth).
    mfu: float = 0.40
    bw_util: float = 0.60

    def line(self) -> str:
        return (f"{self.name}: {self.peak_flops / 1e12:g} TFLOP/s bf16 and {self.mem_bw / 1e9:g} GB/s per {self.unit},"
                f" assumed {self.mfu:.0%} of peak FLOP/s and {self.bw_util:.0%} of bandwidth")


GPUS = {
    "h100": Accelerator("h100", 989e12, 3.35e12),
    "h200": Accelerator("h200", 989e12, 4.8e12),
    "b200": Accelerator("b200", 2250e12, 8.0e12),
    "a100": Accelerator("a100", 312e12, 2.039e12),
    "l40s": Accelerator("l40s", 362e12, 0.864e12),
    "l4": Accelerator("l4", 121e12, 0.3e12),
}
# A server core's share of DRAM bandwidth (STREAM-like, one core streaming): an assumption.
CPU_CORE_BW = 12e9


def cpu_accelerator(cpuinfo: str | None = None) -> Accelerator:
    """One core of this machine: clock x FLOPs a cycle. Two FMA pipes: 32 fp32 FLOPs a cycle at
    256 bits, 64 where they are 512 bits wide (Xeons with AVX-512; AMD from Zen 5, the first of
    its cores with VP2INTERSECT: Zen 4 splits AVX-512 over 256-bit pipes); doubled for bf16
    where the core has avx512_bf16 or AMX. Half of that is assumed reached."""
    text = cpuinfo if cpuinfo is not None else _read("/proc/cpuinfo")
    mhz = next((float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")), 2500.0)
    flags = cpu_flags(text)
    amd = "AuthenticAMD" in text
    wide = "avx512f" in flags and (not amd or "avx512_vp2intersect" in flags)
    per_cycle = (64 if wide else 32) * (2 if BF16_FLAGS & flags else 1)
    return Accelerator("cpu", mhz * 1e6 * per_cycle, CPU_CORE_BW, unit="core", mfu=0.5, bw_util=0.6)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def accelerator(name: str, peak_tflops: float | None = None, mem_bw_gbs: float | None = None) -> Accelerator:
    """The named accelerator, with --peak-tflops/--mem-bw over its figures; an unknown name
    needs both."""
    known = {**GPUS, "cpu": cpu_accelerator()}
    key = name.lower()
    if key not in known and (peak_tflops is None or mem_bw_gbs is None):
        raise UserError(f"accelerator '{name}': not in the table ({', '.join(sorted(known))});"
                        f" give its figures with --peak-tflops and --mem-bw (GB/s)")
    acc = known.get(key, Accelerator(name, 0.0, 0.0))
    if peak_tflops is not None:
        acc = replace(acc, peak_flops=peak_tflops * 1e12)
    if mem_bw_gbs is not None:
        acc = replace(acc, mem_bw=mem_bw_gbs * 1e9)
    return acc


@dataclass(frozen=True)
class ModelShape:
    name: str
    params: float  # every parameter, the (tied or untied) embedding and head included
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @property
    def embedding_params(self) -> float:
        return float(self.vocab * self.hidden)

    @property
    def layer_params(self) -> float:
        return (self.params - self.embedding_params * (1 if self.tied else 2)) / self.layers

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> float:
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


# The models the presets name (their HF config.json figures), matched in model.path.
MODELS = {
    "smollm2": ModelShape("SmolLM2-135M", 134.5e6, 30, 576, 3, 64, 49152, True),
    "qwen2.5-7b": ModelShape("Qwen2.5-7B", 7.62e9, 28, 3584, 4, 128, 152064, False),
    "qwen2.5-14b": ModelShape("Qwen2.5-14B", 14.77e9, 48, 5120, 8, 128, 152064, False),
}


def model_shape(path: str, home: Path | None = None) -> ModelShape:
    """The shape of model.path: a known name in it, else the config.json of a local HF folder
    (its own, or the home's model store); nothing is downloaded."""
    key = next((k for k in MODELS if k in path.lower()), None)
    if key:
        return MODELS[key]
    for folder in (Path(path), (home / "models" / path) if home else None):
        if folder is not None and (folder / "config.json").is_file():
            return shape_from_config(json.loads((folder / "config.json").read_text()), folder.name)
    raise UserError(f"model.path '{path}': plan knows {', '.join(MODELS)} by name, or a local HF folder with config.json")


def shape_from_config(c: dict, name: str) -> ModelShape:
    hidden, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or hidden // heads
    kv = c.get("num_key_value_heads", heads)
    tied = bool(c.get("tie_word_embeddings", False))
    attn = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    mlp = 3 * hidden * c["intermediate_size"]
    params = layers * (attn + mlp) + vocab * hidden * (1 if tied else 2)
    return ModelShape(name, float(params), layers, hidden, kv, head_dim, vocab, tied)

