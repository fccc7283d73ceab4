"""A stand-in engine that answers at once, for plumbing benchmarks only (benchmarks/scale.py).

    memagent batch --runner data --input rows/ --output out/ engine.kind=echo

With the model's cost taken out, what a run measures is everything else: reading and
sharding the input, the tokenizer and the agent loop over every chunk, the actors, writing
the output. Every turn gets the same short text, a boxed answer that also stands as the memory,
so a loop reads its whole document and ends with a prediction. Only the tokenizer is loaded.
`memagent serve` and `memagent train` refuse it (engine.refuse_stand_in): its answers mean nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from transformers import AutoTokenizer

from pipelines.agent.turns import Response
from pipelines.engine.base import Delta, GenRequest

TEXT = "\\boxed{echo}"


class EchoEngine:
    def __init__(self, model_dir: str, version: int = 0):
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.version = version
        self._ids = self.tokenizer.encode(TEXT, add_special_tokens=False)

    async def generate(self, request: GenRequest) -> Response:
        n = request.sampling.max_tokens or len(self._ids)
        ids = self._ids[:n]
        logprobs = [0.0] * len(ids) if request.sampling.logprobs else None
        return Response(ids, self.tokenizer.decode(ids), "stop" if len(ids) == len(self._ids) else "length",
                        logprobs, self.version, self.version)

    async def stream(self, request: GenRequest) -> AsyncIterator[Delta]:
        resp = await self.generate(request)
        yield Delta(resp.text, resp.token_ids, resp.finish_reason)

    async def load_weights(self, path: str, version: int) -> None:
        self.version = version

    async def close(self) -> None:
        pass

