"""Transformers' own continuous batching behind the Engine interface: a batching engine without vLLM.

    .venv/bin/python benchmarks/rollout.py --quick engine.kind=hf_batch model.path=/some/hf/folder

`ContinuousBatchingManager` runs one background thread that packs every queued request into
each forward step (prefill chunks and decodes together, paged KV cache), so many concurrent
`generate` calls share the model like they do in vLLM. It is what runs where vLLM cannot
(a GPU machine with only torch and transformers). Works with transformers 5.17 and 5.19.

What the manager fixes per engine rather than per request, and what we do about it:
  - sampling on/off is one switch: it always samples; a greedy request gets a temperature
    so low that the softmax is one-hot at the argmax (exact greedy, without a sort per step).
  - temperature varies per request (per-request logits processors); top_p < 1 would need a
    full-vocabulary sort per token each step (~145 ms for 32 rows on 2 CPU cores), so top_p
    is fixed at 1.0 and a request asking for another value is refused.
  - one random generator, seeded from `engine.seed`: per-request seeds are not honoured.
  - logprobs are those of the distribution sampled from (after temperature), as in
    HF `generate`'s scores; a greedy token's is ~0.
  - no stop strings: a request with some is streamed (every token comes back, with its
    logprob) and cancelled at the first, which frees its slot at the next step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import torch

from pipelines.agent.codec import ChatCodec
from pipelines.agent.turns import Response
from pipelines.engine.base import Delta, GenRequest, Sampling
from pipelines.engine.config import EngineConfig
from pipelines.engine.streaming import TextDeltas
from pipelines.errors import UserError

GREEDY_TEMPERATURE = 1e-6
# Any value but 1.0 makes transformers create the temperature processor; every request sets its own.
DEFAULT_TEMPERATURE = 0.5
PAGE_TOKENS = 256
_ids = itertools.count()


def kv_bytes_per_token(model_config: Any, dtype: torch.dtype) -> int:
    """Bytes of K and V one token takes over all layers (sizes the paged cache)."""
    c = model_config.get_text_config()
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()


def cache_blocks(cfg: EngineConfig, per_token: int, on_cpu: bool) -> int:
    """Pages of 256 tokens: room for max_num_seqs full-length sequences, within cpu_kvcache_gib on CPU."""
    tokens = cfg.max_num_seqs * cfg.max_model_len
    if on_cpu:
        tokens = min(tokens, cfg.cpu_kvcache_gib * 2**30 // per_token)
    return max(1, math.ceil(tokens / PAGE_TOKENS))


def cb_config(cfg: EngineConfig, num_blocks: int, on_cpu: bool) -> Any:
    """The continuous-batching config; only fields both 5.17 and 5.19 know, plus optional ones."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    fields = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    kw = dict(num_blocks=num_blocks, max_batch_tokens=cfg.max_batch_tokens,
              max_requests_per_batch=cfg.max_num_seqs, return_logprobs=True, per_request_processors=True,
              seed=cfg.seed)
    if not on_cpu:
        kw["max_memory_percent"] = cfg.gpu_memory_utilization
    return ContinuousBatchingConfig(**{k: v for k, v in kw.items() if k in fields})


class HFBatchEngine:
    def __init__(self, model_dir: str, cfg: EngineConfig, version: int = 0):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        on_cpu = self.device.type == "cpu"
        dtype = torch.float32 if on_cpu else torch.bfloat16
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # sdpa: the paged path transformers runs on CPU and on CUDA without the flash-attn package
        # (5.17 calls it "paged|sdpa"); with flash-attn installed, the manager switches to it itself.
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=dtype, attn_implementation="sdpa").to(self.device).eval()
        self.codec = ChatCodec(self.tokenizer)
        self.version = version
        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        self._eos = set(eos if isinstance(eos, list) else [eos])
        self._cb = cb_config(cfg, cache_blocks(cfg, kv_bytes_per_token(self.model.config, dtype), on_cpu), on_cpu)
        self._open = asyncio.Event()
        self._open.set()
        self._loading = asyncio.Lock()
        self.manager = self._start_manager()

    def _start_manager(self) -> Any:
        from transformers import GenerationConfig

        eos = sorted(self._eos)
        pad = eos[0] if self.tokenizer.pad_token_id is None else self.tokenizer.pad_token_id
        gen = GenerationConfig(do_sample=True, temperature=DEFAULT_TEMPERATURE, top_p=1.0, top_k=None,
                               eos_token_id=eos, pad_token_id=pad)
        manager = self.model.init_continuous_batching(generation_config=gen, continuous_batching_config=self._cb)
        manager.start()
        return manager

    async def generate(self, request: GenRequest) -> Response:
        s = request.sampling
        version, start = self.version, time.perf_counter()
        if s.stop:  # the manager knows no stop strings: the stream watches the text and cancels at one
            ids, text, finish, logprobs = await self._until_stop(request)
            return Response(ids, text, finish, logprobs, version, self.version, time.perf_counter() - start)
        prompt = await self._prepare(request)
        done = asyncio.get_running_loop().create_future()

        def deliver(output: Any) -> None:
            if output.is_finished() and not done.done():
                done.set_result(output)

        rid = self._add(prompt, s, deliver)
        try:
            out = _checked(await done)
        except asyncio.CancelledError:
            self._cancel(rid)
            raise
        ids = list(out.generated_tokens)[:s.max_tokens]
        logprobs = [float(x) for x in out.logprobs[:len(ids)]] if s.logprobs else None
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Response(ids, text, self._finish(ids, s), logprobs, version, self.version, time.perf_counter() - start)

    async def _until_stop(self, request: GenRequest) -> tuple[list[int], str, str, list[float] | None]:
        """(ids, text, finish reason, logprobs) of a request with stop strings, ended at the first."""
        s = request.sampling
        deltas, text, finish, logprobs = TextDeltas(self.tokenizer, s.stop), [], None, []
        async with aclosing(self._outputs(request)) as outputs:
            async for out in outputs:
                piece = deltas.push(list(out.generated_tokens)[len(deltas.ids):s.max_tokens])
                logprobs = out.logprobs
                if piece is not None:
                    text.append(piece.text)
                    if piece.finish_reason:
                        finish = piece.finish_reason
                        break
        if finish is None:
            last = deltas.finish(self._finish(deltas.ids, s))
            text.append(last.text)
            finish = last.finish_reason
        ids = deltas.ids
        return ids, "".join(text), finish, [float(x) for x in logprobs[:len(ids)]] if s.logprobs else None

    async def stream(self, request: GenRequest) -> AsyncIterator[Delta]:
        s = request.sampling
        deltas = TextDeltas(self.tokenizer, s.stop)
        async with aclosing(self._outputs(request)) as outputs:
            async for out in outputs:
                piece = deltas.push(list(out.generated_tokens)[len(deltas.ids):s.max_tokens])
                if piece is not None:
                    yield piece
                    if piece.finish_reason:
                        return
        yield deltas.finish(self._finish(deltas.ids, s))

    async def _outputs(self, request: GenRequest) -> AsyncIterator[Any]:
        """The manager's outputs of one streamed request, one per step, up to the finished one;
        closed early, the request is cancelled and its slot freed at the next step."""
        prompt = await self._prepare(request)
        outputs: asyncio.Queue = asyncio.Queue()
        rid = self._add(prompt, request.sampling, outputs.put_nowait, streaming=True)
        finished = False
        try:
            while not finished:
                out = _checked(await outputs.get())
                finished = out.is_finished()
                yield out
        finally:
            if not finished:
                self._cancel(rid)

    async def _prepare(self, request: GenRequest) -> list[int]:
        s = request.sampling
        prompt = request.prompt_ids if request.prompt_ids is not None else self.codec.encode_chat(request.messages)
        prompt = list(prompt)
        if s.temperature > 0 and s.top_p < 1.0:
            raise UserError(f"top_p={s.top_p}: engine.kind=hf_batch samples with top_p=1.0 only "
                            "(use engine.kind=vllm or hf for nucleus sampling)")
        if len(prompt) + s.max_tokens > self.cfg.max_model_len:
            raise ValueError(f"prompt of {len(prompt)} tokens + max_tokens {s.max_tokens} exceeds "
                             f"engine.max_model_len={self.cfg.max_model_len}")
        await self._open.wait()  # closed only while a 5.17 manager drains for a weight swap
        return prompt

    def _finish(self, ids: list[int], s: Sampling) -> str:
        return "stop" if ids and ids[-1] in self._eos else ("length" if len(ids) >= s.max_tokens else "stop")

    def _add(self, prompt: list[int], s: Sampling, deliver: Callable[[Any], None], streaming: bool = False) -> str:
        """One request into the manager; its thread hands each output to `deliver` on this event loop
        (every token when streaming, else only the finished one)."""
        rid = f"hfb{next(_ids)}"
        self.manager.register_result_handler(rid, deliver)
        temperature = GREEDY_TEMPERATURE if s.temperature == 0 else s.temperature
        if self.manager.add_request(prompt, request_id=rid, max_new_tokens=s.max_tokens,
                                    temperature=float(temperature), streaming=streaming) is None:
            raise RuntimeError("hf_batch engine: the batching manager refused the request (stopped or crashed)")
        return rid

    def _cancel(self, rid: str) -> None:
        """Nobody waits for this request any more: free its slot. A cancelled request never
        finishes, so its result handler is dropped here, not by the manager."""
        self.manager.cancel_request(rid)
        router = getattr(self.manager, "output_router", None)
        if router is not None:
            with router._lock:
                router.result_handlers.pop(rid, None)

    async def load_weights(self, path: str, version: int) -> None:
        """Swap weights in place between steps; requests in flight keep going on the new weights.

        transformers >= 5.19 pauses the loop (cache and requests kept); 5.17 has no pause, so
        there the manager finishes what is in flight on the old weights, new requests wait, and
        a fresh manager starts on the new ones: nothing is dropped either way.
        """
        from transformers import AutoModelForCausalLM

        async with self._loading:
            fresh = await asyncio.to_thread(AutoModelForCausalLM.from_pretrained, path, dtype=self.model.dtype)
            state = fresh.state_dict()
            if hasattr(self.manager, "pause"):
                await asyncio.to_thread(self._swap_paused, state)
            else:
                await self._swap_drained(state)
            self.version = version

    def _swap_paused(self, state: dict) -> None:
        with self.manager.pause(), torch.no_grad():
            self.model.load_state_dict(state)

    async def _swap_drained(self, state: dict) -> None:
        self._open.clear()
        try:
            await asyncio.to_thread(self.manager.stop, block=True)
            await asyncio.to_thread(self.manager.destroy)
            with torch.no_grad():
                self.model.load_state_dict(state)
            self.manager = self._start_manager()
        finally:
            self._open.set()

    async def close(self) -> None:
        if self.manager is not None:
            await asyncio.to_thread(self.manager.stop, block=True, hard_stop=True)
            await asyncio.to_thread(self.manager.destroy)
            self.manager = None
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _checked(output: Any) -> Any:
    if output.error is not None:
        raise RuntimeError(f"hf_batch engine: generation failed: {output.error}")
    return output
