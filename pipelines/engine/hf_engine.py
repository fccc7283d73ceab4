"""Transformers engine: the fallback, and what unit tests use with tiny random models.

Requests run one at a time in a worker thread; correctness, not speed, is its job. A
stream gets each token from transformers' streamer hook, and a closed stream stops the
generation at its next token (a stopping criterion), so its worker is free again. Stop
strings are a stopping criterion on the new text, so a stopped turn keeps its logprobs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from pipelines.agent.codec import ChatCodec
from pipelines.agent.turns import Response
from pipelines.engine.base import Delta, GenRequest, Sampling
from pipelines.engine.streaming import TextDeltas, cut_at_stop


class HFEngine:
    def __init__(self, model_dir: str, dtype: str = "float32", version: int = 0):
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
        self.codec = ChatCodec(self.tokenizer)
        self.version = version
        self._lock = asyncio.Lock()

    def _prompt(self, request: GenRequest) -> list[int]:
        return list(request.prompt_ids if request.prompt_ids is not None else self.codec.encode_chat(request.messages))

    async def generate(self, request: GenRequest) -> Response:
        version, start = self.version, time.perf_counter()
        prompt = self._prompt(request)
        async with self._lock:
            ids, text, finish, logprobs = await asyncio.to_thread(self._generate, prompt, request.sampling)
        return Response(ids, text, finish, logprobs, version, self.version, time.perf_counter() - start)

    def _run(self, prompt: list[int], s: Sampling, **extra):
        if s.seed is not None:
            torch.manual_seed(s.seed)
        sample = s.temperature > 0
        with torch.no_grad():
            return self.model.generate(
                torch.tensor([prompt]), max_new_tokens=s.max_tokens, do_sample=sample,
                temperature=s.temperature if sample else None, top_p=s.top_p if sample else None,
                top_k=0 if sample else None,  # transformers' default top_k=50 is not the distribution we mean
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id, **extra)

    def _generate(self, prompt: list[int], s: Sampling) -> tuple:
        # transformers' own stop_strings also match across the prompt's end: this checks new text only
        stops = {"stopping_criteria": StoppingCriteriaList([_StopText(self.tokenizer, len(prompt), s.stop)])}
        out = self._run(prompt, s, output_scores=True, return_dict_in_generate=True, **(stops if s.stop else {}))
        ids = out.sequences[0, len(prompt):].tolist()
        logprobs = None
        if s.logprobs:  # `scores` are after temperature and top_p: the distribution sampled from
            steps = torch.stack(out.scores, dim=0)[:, 0, :].float()
            lp = torch.log_softmax(steps, dim=-1)
            logprobs = lp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        text, stopped = cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), s.stop)
        return ids, text, "stop" if stopped else self._finish(ids, s), logprobs

    def _finish(self, ids: list[int], s: Sampling) -> str:
        eos = self.tokenizer.eos_token_id
        return "stop" if ids and ids[-1] == eos else ("length" if len(ids) >= s.max_tokens else "stop")

    async def stream(self, request: GenRequest) -> AsyncIterator[Delta]:
        s = request.sampling
        prompt = self._prompt(request)
        feed = _Feed(asyncio.get_running_loop())
        deltas = TextDeltas(self.tokenizer, s.stop)
        async with self._lock:
            work = asyncio.ensure_future(asyncio.to_thread(
                self._run, prompt, s, streamer=feed, stopping_criteria=StoppingCriteriaList([feed])))
            work.add_done_callback(lambda _: feed.queue.put_nowait(None))  # a failed generate ends the stream too
            try:
                while (ids := await feed.queue.get()) is not None:
                    if (piece := deltas.push(ids)) is not None:
                        yield piece
                        if piece.finish_reason:
                            return
                await work
                yield deltas.finish(self._finish(deltas.ids, s))
            finally:
                feed.closed.set()
                await asyncio.wait([work])

    async def load_weights(self, path: str, version: int) -> None:
        async with self._lock:
            fresh = AutoModelForCausalLM.from_pretrained(path, dtype=self.model.dtype)
            self.model.load_state_dict(fresh.state_dict())
            self.version = version

    async def close(self) -> None:
        self.model = None


class _Feed(BaseStreamer, StoppingCriteria):
    """transformers' streamer hook -> an asyncio queue of new token ids (None at the end); as a
    stopping criterion, it ends generation once the stream is closed."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue, self.closed = loop, asyncio.Queue(), threading.Event()
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate() hands over the prompt first
            self._prompt_seen = True
            return
        self.loop.call_soon_threadsafe(self.queue.put_nowait, value.reshape(-1).tolist())

    def end(self) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.closed.is_set(), dtype=torch.bool, device=input_ids.device)


class _StopText(StoppingCriteria):
    """Ends generation at the token that completes a stop string in the generated text."""

    def __init__(self, tokenizer, prompt_len: int, stops: tuple[str, ...]):
        self.tokenizer, self.prompt_len, self.stops = tokenizer, prompt_len, stops

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        done = [cut_at_stop(self.tokenizer.decode(row[self.prompt_len:].tolist(), skip_special_tokens=True),
                            self.stops)[1] for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
