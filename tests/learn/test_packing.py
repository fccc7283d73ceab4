"""Token-budget packing and response-only logprobs on a tiny random Llama built in the test."""

import random

import pytest
import torch

from pipelines.errors import UserError
from pipelines.learn.forward import PACKED_ATTENTION, response_logprobs
from pipelines.learn.loss import loss_weights, multi_conv_dapo_loss
from pipelines.learn.packing import (TrainSeq, batch_weights, pack, padding_fraction, plan_micro_batches,
                                     plan_padded_batches)

VOCAB = 300


def tiny_llama(attention: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    cfg._attn_implementation = attention
    return LlamaForCausalLM(cfg).float().eval()


@pytest.fixture(scope="module", params=[PACKED_ATTENTION, "sdpa"])
def model(request):
    """The learner's attention (one causal call per packed sequence) and transformers' own
    (a block-diagonal mask from the position ids): every test below holds for both."""
    return tiny_llama(request.param)


def test_packed_attention_equals_the_masked_path_in_values_and_gradients():
    seqs = _seqs()
    packed = pack(seqs, list(range(len(seqs))))
    ours, masked = tiny_llama(PACKED_ATTENTION), tiny_llama("sdpa")  # the same weights (seed 0)
    a, b = response_logprobs(ours, packed), response_logprobs(masked, packed)
    assert torch.allclose(a, b, atol=1e-5)
    (a.sum() + b.sum()).backward()
    grads = dict(masked.named_parameters())
    for name, p in ours.named_parameters():
        assert torch.allclose(p.grad, grads[name].grad, atol=1e-5), name


def _seqs(n_convs=(3, 1, 2), seed=0) -> list[TrainSeq]:
    """Rollouts with different numbers of conversations and lengths, random tokens."""
    rng = random.Random(seed)
    out = []
    for rollout, (n, adv) in enumerate(zip(n_convs, (0.75, -0.5, -0.25))):
        for _ in range(n):
            p, r = rng.randint(3, 12), rng.randint(2, 7)
            out.append(TrainSeq([rng.randrange(VOCAB) for _ in range(p)], [rng.randrange(VOCAB) for _ in range(r)],
                                None, adv, rollout))
    return out


def test_plan_is_first_fit_decreasing_within_budget():
    assert plan_micro_batches([5, 3, 4, 2, 6], 8) == [[3, 4], [0, 1], [2]]
    assert plan_micro_batches([], 8) == []


def test_plan_puts_every_index_exactly_once():
    rng = random.Random(1)
    lengths = [rng.randint(1, 100) for _ in range(200)]
    plan = plan_micro_batches(lengths, 128)
    assert sorted(i for b in plan for i in b) == list(range(200))
    assert all(sum(lengths[i] for i in b) <= 128 for b in plan)
    assert plan == plan_micro_batches(lengths, 128)
    assert padding_fraction(lengths, plan) == 0.0


def test_budget_below_one_conversation_is_a_one_line_error():
    with pytest.raises(UserError) as e:
        plan_micro_batches([3, 6, 2], 4)
    assert str(e.value) == "learn.token_budget=4: below one conversation of 6 tokens"


def test_padded_batching_cost():
    plan = plan_padded_batches([2, 4, 8, 1], 8)
    assert plan == [[0, 1], [2], [3]]
    # computed: 2 * 4 + 8 + 1 = 17 tokens, of which 15 real
    assert padding_fraction([2, 4, 8, 1], plan, padded=True) == pytest.approx(2 / 17)


def test_pack_concatenates_and_targets_the_predicting_positions():
    seqs = [TrainSeq([1, 2], [3, 4], [-0.5, -0.25], 1.0, 0), TrainSeq([5], [6], None, -2.0, 1),
            TrainSeq([7, 8], [9, 10], None, 0.0, 1)]
    p = pack(seqs, [0, 1], loss_agg="rollout_mean")
    assert p.input_ids.tolist() == [[1, 2, 3, 4, 5, 6]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 0, 1]]
    assert p.target_positions.tolist() == [1, 2, 4]
    assert p.target_ids.tolist() == [3, 4, 6]
    assert p.seq_index.tolist() == [0, 0, 1]
    assert p.old_logprobs.tolist() == [-0.5, -0.25, 0.0]
    assert p.advantages.tolist() == [1.0, 1.0, -2.0]
    assert p.rollout_ids.tolist() == [0, 0, 1]
    # rollout 0: 2 tokens, 1/(2 * 2) each; rollout 1: 3 tokens over seqs 1 and 2 (seq 2 is not
    # in this micro-batch), 1/(2 * 3) each; token_mean: 1/5 of the batch's 5 tokens
    assert p.weights.tolist() == pytest.approx([1 / 4, 1 / 4, 1 / 6])
    assert pack(seqs, [0, 1]).weights.tolist() == pytest.approx([0.2, 0.2, 0.2])


def test_lead_tokens_weigh_more_and_the_batch_still_sums_to_one():
    """learn.sft_lead [1, 3]: each response's first token weighs 3 times the rest; 5 tokens of which
    3 lead make 3 * 3 + 2 = 11 units, so a lead token weighs 3/11 and any other 1/11."""
    seqs = [TrainSeq([1], [3, 4], None, 1.0, 0), TrainSeq([5], [6], None, 1.0, 0),
            TrainSeq([7], [9, 10], None, 1.0, 0)]
    weights = batch_weights(seqs, "token_mean", (1, 3.0))
    parts = [pack(seqs, idx, "token_mean", weights, (1, 3.0)).weights.tolist() for idx in ([0, 1], [2])]
    assert parts == [pytest.approx([3 / 11, 1 / 11, 3 / 11]), pytest.approx([3 / 11, 1 / 11])]
    assert pack(seqs, [2], lead=(5, 2.0)).weights.tolist() == pytest.approx([2 / 10, 2 / 10])


def test_packed_logprobs_equal_each_sequence_alone(model):
    seqs = _seqs()
    with torch.no_grad():
        together = response_logprobs(model, pack(seqs, list(range(len(seqs)))))
        alone = torch.cat([response_logprobs(model, pack(seqs, [i])) for i in range(len(seqs))])
    assert torch.allclose(together, alone, atol=1e-5)


def test_autocast_logprobs_are_close_and_train_the_float32_weights(model):
    seqs = _seqs()
    packed = pack(seqs, list(range(len(seqs))))
    with torch.no_grad():
        exact = response_logprobs(model, packed)
    mixed = response_logprobs(model, packed, autocast=True)
    assert mixed.dtype == torch.float32
    assert (mixed.detach() - exact).abs().mean() < 0.02  # bf16 body, float32 head
    mixed.sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)
    model.zero_grad(set_to_none=True)


def test_logprobs_at_temperature_match_full_logits(model):
    seqs = _seqs((1,), seed=3)
    s = seqs[0]
    ids = torch.tensor([s.prompt_ids + s.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(s.prompt_ids) - 1:-1]
        for t in (0.7, 1.0, 0.0):
            naive = torch.log_softmax(logits / (t or 1.0), -1).gather(-1, torch.tensor(s.response_ids)[:, None])[:, 0]
            assert torch.allclose(response_logprobs(model, pack(seqs, [0]), temperature=t), naive, atol=1e-5)


def _grads(model, seqs, plan, agg):
    model.zero_grad()
    metrics = []
    for b in plan:
        p = pack(seqs, b, loss_agg=agg)
        loss, m = multi_conv_dapo_loss(response_logprobs(model, p), p.old_logprobs, p.advantages, p.mask,
                                       weights=p.weights)
        loss.backward()
        metrics.append(m)
    return {n: q.grad.clone() for n, q in model.named_parameters()}, metrics


@pytest.mark.parametrize("agg", ["token_mean", "rollout_mean"])
def test_micro_batches_give_the_full_batch_gradient(model, agg):
    seqs = _seqs()
    with torch.no_grad():  # behaviour logprobs near the policy's, so some tokens clip
        base = response_logprobs(model, pack(seqs, list(range(len(seqs)))))
    old = (base + 0.3 * torch.randn(base.shape, generator=torch.Generator().manual_seed(0))).tolist()
    seqs, k = list(seqs), 0
    for i, s in enumerate(seqs):
        seqs[i], k = TrainSeq(s.prompt_ids, s.response_ids, old[k:k + len(s.response_ids)], s.advantage,
                              s.rollout), k + len(s.response_ids)
    full_plan = [list(range(len(seqs)))]
    plan = plan_micro_batches([len(s) for s in seqs], 20)
    assert len(plan) > 2
    full, (m,) = _grads(model, seqs, full_plan, agg)
    micro, _ = _grads(model, seqs, plan, agg)
    assert m["clip_low"] + m["clip_high"] > 0
    for name, g in full.items():
        assert torch.allclose(micro[name], g, atol=1e-5), name
    assert any(g.abs().sum() > 0 for g in full.values())
    # the packed weights are loss_weights of the whole batch with per-token rollout ids
    p = pack(seqs, full_plan[0], loss_agg=agg)
    assert torch.allclose(p.weights, loss_weights(p.mask, p.rollout_ids, agg))
