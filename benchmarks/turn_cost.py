"""Engine time of a memory turn, by prompt template and KV block size (why engine.block_size is 32
on the CPU build). Rounds of --n memory turns in flight at once, each row's chunk K of a --length
niah_single document with the initial memory: the release template, the gated one, and the gated
one cut to one token (the floor of a kept turn), in turn, the order reversed every other round so
drift hits them alike; one engine per block size, ratios against the release template at vLLM's
own block in the same run. The model sets what the turns write (the ungated SFT model writes the
4-token "No previous memory" under either template, as long as the old `[KEEP]` marker was).
The one-token turn is what a keep costs now (an empty reply, ended by its first token).

    .venv/bin/python benchmarks/turn_cost.py --model .memagent/bench/gates/sft/best   # ~4 min on 2 cores

Prefix caching reuses whole KV blocks only: a turn's prompt shares its instructions, question and
memory with the document's previous turn, so the smaller the block, the more of that prefix the
next turn finds cached. The last line is one JSON object: {"seconds": {block: {variant: s}},
"tokens_per_turn": {block: {variant: ...}}, "prompt_tokens": {template: ...}, "ratio":
{block: {variant: seconds / release at the first block}}, "rounds", "n"}.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402

# (name, template, whether the turn may run to the memory budget): "gated, 1 token" stops every turn
# after its first token, the prefill alone: what a kept turn (an empty reply) costs.
VARIANTS = (("release", "release", True), ("gated", "gated", True), ("gated, 1 token", "gated", False))


async def one_round(engine, prompts: list[list[dict]], budget: int) -> tuple[float, float]:
    """Seconds for every prompt of one round in flight at once, and the mean tokens generated."""
    from pipelines.engine.base import GenRequest, Sampling

    start = time.perf_counter()
    out = await asyncio.gather(*(engine.generate(GenRequest(Sampling(max_tokens=budget), messages=m))
                                 for m in prompts))
    return time.perf_counter() - start, sum(len(o.token_ids) for o in out) / len(out)


def prompts_at(template, rows, ids, tok, k: int, chunk: int) -> list[list[dict]]:
    return [[{"role": "user", "content": template.update_prompt(r.question, template.initial_memory,
                                                                tok.decode(d[k * chunk:(k + 1) * chunk]))}]
            for r, d in zip(rows, ids)]


async def measure(model: str, block: int, rows, ids, tok, args) -> dict:
    """One engine at BLOCK: ROUNDS rounds of each variant, in turn (the order reversed every other
    round); {variant: (seconds, tokens/turn)}."""
    from pipelines.agent.templates import get_templates
    from pipelines.engine.config import EngineConfig
    from pipelines.engine.vllm_engine import VLLMEngine

    engine = VLLMEngine(model, EngineConfig(max_model_len=4096, block_size=block))
    try:
        names = [v[0] for v in VARIANTS]
        seconds, tokens = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        await one_round(engine, prompts_at(get_templates("release"), rows, ids, tok, 0, args.chunk), 1)  # warm-up
        chunks = len(ids[0]) // args.chunk
        for i in range(args.rounds):
            for j, (name, template, full) in enumerate(VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
                k = 1 + (len(VARIANTS) * i + j) % (chunks - 1)  # each round a chunk not yet cached
                t = get_templates(template)
                s, g = await one_round(engine, prompts_at(t, rows, ids, tok, k, args.chunk), args.budget if full else 1)
                seconds[name] += s
                tokens[name] += g / args.rounds
        return {name: (round(seconds[name], 2), round(tokens[name], 2)) for name in names}
    finally:
        await engine.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="an HF model folder (what it writes sets the tokens per turn)")
    p.add_argument("--blocks", default="128,32", help="KV block sizes, the first the baseline (vLLM's CPU default)")
    p.add_argument("--n", type=int, default=32, help="turns in flight a round (eval.concurrency)")
    p.add_argument("--rounds", type=int, default=15, help="rounds per template and block")
    p.add_argument("--length", type=int, default=16384, help="document tokens (niah_single)")
    p.add_argument("--chunk", type=int, default=256, help="agent.chunk_size")
    p.add_argument("--budget", type=int, default=64, help="agent.memory_budget")
    args = p.parse_args()

    from transformers import AutoTokenizer

    from pipelines.agent.templates import get_templates
    from pipelines.agent.codec import ChatCodec
    from pipelines.eval.rows import built_rows

    tok = AutoTokenizer.from_pretrained(args.model)
    rows = list(built_rows("niah_single", args.length, args.n, 0, tok))
    ids = [tok(r.context, add_special_tokens=False)["input_ids"] for r in rows]
    blocks = [int(b) for b in args.blocks.split(",")]
    by_block = {b: asyncio.run(measure(args.model, b, rows, ids, tok, args)) for b in blocks}
    codec = ChatCodec(tok)
    prompt_tokens = {name: len(codec.encode_chat(prompts_at(get_templates(name), rows[:1], ids, tok, 1, args.chunk)[0]))
                     for name in ("release", "gated")}
    base = by_block[blocks[0]]["release"][0]
    print(f"| block | template | s for {args.rounds} rounds of {args.n} turns | tokens/turn | vs release at block {blocks[0]} |")
    print("|---|---|---|---|---|")
    for b, res in by_block.items():
        for name, (s, g) in res.items():
            print(f"| {b} | {name} | {s} | {g} | {s / base:.2f} |")
    print(f"prompt tokens at chunk 1: {prompt_tokens}")
    finish({"seconds": {b: {t: r[t][0] for t in r} for b, r in by_block.items()},
            "tokens_per_turn": {b: {t: r[t][1] for t in r} for b, r in by_block.items()},
            "prompt_tokens": prompt_tokens,
            "ratio": {b: {t: round(r[t][0] / base, 2) for t in r} for b, r in by_block.items()},
            "rounds": args.rounds, "n": args.n})


if __name__ == "__main__":
    main()
