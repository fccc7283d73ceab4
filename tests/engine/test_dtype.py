"""engine.dtype=auto: bfloat16 where it is computed natively (a GPU, a CPU with AVX512-BF16 or AMX),
float32 elsewhere (vLLM's CPU build emulates bf16 there, 2.5x slower); a set dtype always wins.
learn.autocast=auto follows the same rule (bf16 autocast on an AVX2-only core: ~20x slower steps)."""

import pytest
from pydantic import ValidationError

from pipelines.engine.config import EngineConfig, cpu_flags

ZEN3 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
ZEN5 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vp2intersect\n"
SAPPHIRE_RAPIDS = "vendor_id\t: GenuineIntel\nflags\t\t: avx2 avx512f amx_bf16 amx_tile\n"


def test_auto_is_bf16_only_where_it_is_native():
    auto = EngineConfig()
    assert auto.dtype == "auto"
    assert auto.compute_dtype(ZEN3) == "float32"
    assert auto.compute_dtype(ZEN5) == "bfloat16" and auto.compute_dtype(SAPPHIRE_RAPIDS) == "bfloat16"
    assert EngineConfig(use_gpu=True).compute_dtype(ZEN3) == "bfloat16"
    assert auto.compute_dtype("") == "float32"  # no /proc/cpuinfo: the safe choice


def test_a_set_dtype_wins_and_a_bad_one_is_refused():
    assert EngineConfig(dtype="bfloat16").compute_dtype(ZEN3) == "bfloat16"
    assert EngineConfig(dtype="float32").compute_dtype(ZEN5) == "float32"
    with pytest.raises(ValidationError, match="dtype"):
        EngineConfig(dtype="bf16")


def test_flags_are_read_from_the_first_flags_line():
    assert cpu_flags(ZEN5) >= {"avx512_bf16", "avx2"} and cpu_flags("no flags here") == frozenset()


def test_learn_autocast_auto_follows_the_same_rule():
    from pipelines.config import load_config

    learn = load_config(None).learn
    assert learn.autocast == "auto"
    assert not learn.bf16_autocast(ZEN3) and learn.bf16_autocast(ZEN5) and learn.bf16_autocast(SAPPHIRE_RAPIDS)
    assert learn.model_copy(update={"use_gpu": True}).bf16_autocast(ZEN3)
    assert load_config(None, ["learn.autocast=false"]).learn.bf16_autocast(ZEN5) is False
    assert load_config(None, ["learn.autocast=true"]).learn.bf16_autocast(ZEN3) is True
