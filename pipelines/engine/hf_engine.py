"""Transformers engine: the fallback, and what unit tests use with tiny random models.

Requests run one at a time in a worker thread; correctness, not speed, is its job.
"""

from __future__ import annotations

import asyncio
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipelines.agent.codec import ChatCodec
from pipelines.agent.turns import Response
from pipelines.engine.base import GenRequest


class HFEngine:
    def __init__(self, model_dir: str, dtype: str = "float32", version: int = 0):
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
        self.codec = ChatCodec(self.tokenizer)
        self.version = version
        self._lock = asyncio.Lock()

    async def generate(self, request: GenRequest) -> Response:
        prompt = request.prompt_ids if request.prompt_ids is not None else self.codec.encode_chat(request.messages)
        version, start = self.version, time.perf_counter()
        async with self._lock:
            ids, text, finish, logprobs = await asyncio.to_thread(self._generate, list(prompt), request)
        return Response(ids, text, finish, logprobs, version, self.version, time.perf_counter() - start)

    def _generate(self, prompt: list[int], request: GenRequest) -> tuple:
        s = request.sampling
        if s.seed is not None:
            torch.manual_seed(s.seed)
        sample = s.temperature > 0
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt]), max_new_tokens=s.max_tokens, do_sample=sample,
                temperature=s.temperature if sample else None, top_p=s.top_p if sample else None,
                top_k=0 if sample else None,  # transformers' default top_k=50 is not the distribution we mean
                output_scores=True, return_dict_in_generate=True,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        ids = out.sequences[0, len(prompt):].tolist()
        logprobs = None
        if s.logprobs:  # `scores` are after temperature and top_p: the distribution sampled from
            steps = torch.stack(out.scores, dim=0)[:, 0, :].float()
            lp = torch.log_softmax(steps, dim=-1)
            logprobs = lp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        eos = self.tokenizer.eos_token_id
        finish = "stop" if ids and ids[-1] == eos else ("length" if len(ids) >= s.max_tokens else "stop")
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return ids, text, finish, logprobs

    async def load_weights(self, path: str, version: int) -> None:
        async with self._lock:
            fresh = AutoModelForCausalLM.from_pretrained(path, dtype=self.model.dtype)
            self.model.load_state_dict(fresh.state_dict())
            self.version = version

    async def close(self) -> None:
        self.model = None
