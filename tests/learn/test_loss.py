"""Multi-Conv DAPO loss, advantages and weights on hand-computed values (pure torch, no model)."""

import math

import pytest
import torch

from pipelines.learn.loss import group_advantages, loss_weights, multi_conv_dapo_loss, sft_loss

NAN, INF = float("nan"), float("inf")


def test_group_advantages_subtract_the_group_mean_without_std():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5, 1.0, 0.0, 0.0]),
                           ["a", "a", "a", "a", "b", "b", "c", ("d", 1), ("d", 1), ("d", 1)])
    want = [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 2 / 3, -1 / 3, -1 / 3]
    assert adv.tolist() == pytest.approx(want, abs=1e-6)


def test_group_advantages_norm_std_uses_the_population_std():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 0.7]), ["a", "a", "a", "a", "b", "c"], norm_std=True)
    # group a: mean 0.5, population std 0.5; b and c are groups of one: 0, not NaN
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0, 0.0, 0.0], abs=1e-5)


def _two_rollouts(last_row_mask):
    """Rollout 0: two conversations (2 + 1 tokens), A = 0.5. Rollout 1: one conversation, A = -1.
    Masked-out positions hold garbage."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], last_row_mask])
    logprobs = torch.tensor([[-1.0, -2.0, NAN], [-0.5, INF, -INF], [-1.0, -1.0, -1.0]])
    return logprobs.requires_grad_(), torch.tensor([0.5, 0.5, -1.0]), mask, torch.tensor([0, 0, 1])


def test_aggregations_differ_when_rollouts_have_different_token_counts():
    lp, adv, mask, rollouts = _two_rollouts([1, 1, 0])
    old = lp.detach().clone()  # ratio 1: each token's surrogate is its advantage
    tok, m = multi_conv_dapo_loss(lp, old, adv, mask)
    # 5 tokens: 3 * 0.5 + 2 * (-1) = -0.5 -> loss 0.5 / 5
    assert tok.item() == pytest.approx(0.1)
    assert m == pytest.approx({"clip_low": 0.0, "clip_high": 0.0, "ratio_mean": 1.0, "kl": 0.0, "tokens": 5.0})
    roll, _ = multi_conv_dapo_loss(lp, old, adv, mask, loss_agg="rollout_mean", rollout_ids=rollouts)
    # each rollout's mean surrogate (0.5 and -1) weighs 1/2: loss = -(0.5 - 1) / 2
    assert roll.item() == pytest.approx(0.25)
    roll.backward()
    assert torch.isfinite(lp.grad).all()
    # d loss / d logprob = -w * r * A; rollout 0's 3 tokens weigh 1/6, rollout 1's 2 tokens 1/4
    want = [[-0.5 / 6, -0.5 / 6, 0.0], [-0.5 / 6, 0.0, 0.0], [0.25, 0.25, 0.0]]
    assert lp.grad.tolist() == [pytest.approx(r) for r in want]


def test_aggregations_agree_when_rollouts_have_equal_token_counts():
    lp, adv, mask, rollouts = _two_rollouts([1, 1, 1])
    old = lp.detach().clone()
    tok, _ = multi_conv_dapo_loss(lp, old, adv, mask)
    roll, _ = multi_conv_dapo_loss(lp, old, adv, mask, loss_agg="rollout_mean", rollout_ids=rollouts)
    assert tok.item() == pytest.approx(0.25) and roll.item() == pytest.approx(0.25)  # -(1.5 - 3) / 6


def test_loss_weights_sum_to_one_per_row_or_per_token_ids():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0]])
    w = loss_weights(mask, torch.tensor([0, 0, 1]), "rollout_mean")
    want = [[1 / 6, 1 / 6, 0.0], [1 / 6, 0.0, 0.0], [0.25, 0.25, 0.0]]
    assert w.tolist() == [pytest.approx(r) for r in want]
    per_token = loss_weights(mask, torch.tensor([[0, 0, 0], [0, 0, 0], [7, 7, 7]]), "rollout_mean")
    assert torch.allclose(per_token, w)
    assert loss_weights(mask, None, "token_mean").tolist() == [pytest.approx([r * 0.2 for r in row])
                                                             for row in mask.tolist()]


def test_clipping_at_both_bounds():
    ratios = torch.tensor([[1.5, 1.1, 0.5], [0.5, 1.5, 0.9]])
    lp = ratios.log().requires_grad_()
    loss, m = multi_conv_dapo_loss(lp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    # A = +1: min(1.5, 1.28) = 1.28 (clipped high), 1.1, min(0.5, 0.8) = 0.5
    # A = -1: min(-0.5, -0.8) = -0.8 (clipped low), min(-1.5, -1.28) = -1.5, -0.9
    assert loss.item() == pytest.approx(-(1.28 + 1.1 + 0.5 - 0.8 - 1.5 - 0.9) / 6)
    assert m["clip_high"] == pytest.approx(1 / 6) and m["clip_low"] == pytest.approx(1 / 6)
    assert m["ratio_mean"] == pytest.approx(1.0) and m["tokens"] == 6.0
    loss.backward()
    # clipped tokens get no gradient; the others -r * A / 6
    want = [[0.0, -1.1 / 6, -0.5 / 6], [0.0, 1.5 / 6, 0.9 / 6]]
    assert lp.grad.tolist() == [pytest.approx(r) for r in want]


def test_all_equal_group_gives_zero_advantage_and_zero_loss():
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0]), [0, 0, 0])
    assert adv.tolist() == [0.0, 0.0, 0.0]
    lp = torch.tensor([[-1.0, -2.0], [-0.1, -3.0], [-0.7, -0.2]], requires_grad=True)
    loss, _ = multi_conv_dapo_loss(lp, torch.full((3, 2), -1.0), adv, torch.ones(3, 2))
    loss.backward()
    assert loss.item() == 0.0 and lp.grad.abs().sum().item() == 0.0


def test_kl_term_is_k3_to_the_reference():
    lp = torch.zeros(1, 3, requires_grad=True)
    ref = torch.tensor([[math.log(2.0), 0.0, 5.0]])
    loss, m = multi_conv_dapo_loss(lp, torch.zeros(1, 3), torch.zeros(1), torch.tensor([[1, 1, 0]]),
                                   ref_logprobs=ref, kl_coef=0.1)
    # k3 = e^d - d - 1 with d = ref - logp: 2 - ln 2 - 1 and 0; the masked 5.0 never counts
    assert m["kl"] == pytest.approx((1 - math.log(2.0)) / 2)
    assert loss.item() == pytest.approx(0.1 * (1 - math.log(2.0)) / 2)
    loss.backward()
    # d k3 / d logp = 1 - e^d: 1 - 2 = -1 on the first token, weight 1/2, times 0.1
    assert lp.grad.tolist() == [pytest.approx([-0.05, 0.0, 0.0])]
    _, no_ref = multi_conv_dapo_loss(lp, torch.zeros(1, 3), torch.zeros(1), torch.ones(1, 3))
    assert no_ref["kl"] == 0.0


def test_micro_batch_shares_of_full_batch_weights_sum_to_the_full_loss():
    torch.manual_seed(0)
    lp, old = -torch.rand(5, 4), -torch.rand(5, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    adv, rollouts = torch.tensor([0.5, 0.5, -0.5, 1.0, -1.0]), torch.tensor([0, 0, 1, 2, 2])
    for agg in ("token_mean", "rollout_mean"):
        full, _ = multi_conv_dapo_loss(lp, old, adv, mask, loss_agg=agg, rollout_ids=rollouts)
        w = loss_weights(mask, rollouts, agg)
        parts = [multi_conv_dapo_loss(lp[s], old[s], adv[s], mask[s], weights=w[s])[0]
                 for s in (slice(0, 2), slice(2, 3), slice(3, 5))]
        assert sum(parts).item() == pytest.approx(full.item(), abs=1e-7)


def test_sft_loss_is_token_mean_nll_of_the_response():
    lp = torch.tensor([[-1.0, -2.0, NAN], [-3.0, -INF, INF]], requires_grad=True)
    loss, m = sft_loss(lp, torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert loss.item() == pytest.approx(2.0) and m == {"nll": pytest.approx(2.0), "tokens": 3.0}
    loss.backward()
    assert lp.grad.tolist() == [pytest.approx([-1 / 3, -1 / 3, 0.0]), pytest.approx([-1 / 3, 0.0, 0.0])]


def test_bad_aggregation_and_shapes_are_refused():
    with pytest.raises(ValueError, match="loss_agg"):
        loss_weights(torch.ones(2, 2), None, "mean")
    with pytest.raises(ValueError, match="rollout id"):
        loss_weights(torch.ones(2, 2), None, "rollout_mean")
    with pytest.raises(ValueError, match="advantages"):
        multi_conv_dapo_loss(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(3), torch.ones(2, 2))


def test_group_advantages_take_tensor_ids_as_values():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    want = [0.5, -0.5, 0.0, 0.0]
    assert group_advantages(rewards, torch.tensor([7, 7, 3, 3])).tolist() == pytest.approx(want)
    assert group_advantages(rewards, [7, 7, 3, 3]).tolist() == pytest.approx(want)


@pytest.mark.parametrize("ids,what", [(torch.tensor([[7, 7], [3, 3]]), "shape"), ("aabb", "str"),
                                      (iter([7, 7, 3, 3]), "iterator"), (list(torch.tensor([7, 7, 3, 3])), "tensors")])
def test_group_advantages_refuse_ids_that_would_hash_by_identity_or_are_not_a_list(ids, what):
    with pytest.raises(TypeError, match=f"^group_ids: [^\n]*{what}[^\n]*$"):
        group_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ids)


def test_tis_weights_truncate_the_learner_over_behaviour_ratio():
    # learner/behaviour ratios 1, 2, 0.5 | 4, 1.5, (masked: garbage); cap 1.5
    behaviour = torch.tensor([[-1.0, -2.0, -1.0], [-3.0, -1.0, 0.0]])
    old = behaviour + torch.tensor([[0.0, math.log(2.0), math.log(0.5)], [math.log(4.0), math.log(1.5), NAN]])
    lp = old.clone().requires_grad_()  # the learner's current logprobs are its old ones: DAPO ratio 1
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, m = multi_conv_dapo_loss(lp, old, torch.tensor([1.0, -1.0]), mask, behaviour_logprobs=behaviour,
                                   tis_cap=1.5)
    w = [[1.0, 1.5, 0.5], [1.5, 1.5, 0.0]]  # min(ratio, 1.5)
    assert loss.item() == pytest.approx(-(1.0 + 1.5 + 0.5 - 1.5 - 1.5) / 5)
    assert m["tis_weight"] == pytest.approx(6.0 / 5) and m["tis_clipped"] == pytest.approx(2 / 5)
    assert m["clip_low"] == 0.0 and m["clip_high"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0)
    loss.backward()
    # d loss / d logprob = -w_tis * A / 5 (token mean); the weight itself is not differentiated
    assert lp.grad.tolist() == [pytest.approx([-x / 5 for x in w[0]]), pytest.approx([x / 5 for x in w[1]])]


def test_tis_off_is_the_plain_loss_and_on_needs_the_behaviour_logprobs():
    torch.manual_seed(1)
    lp, old, mask, adv = -torch.rand(3, 4), -torch.rand(3, 4), torch.ones(3, 4), torch.tensor([1.0, -0.5, 0.5])
    plain, m = multi_conv_dapo_loss(lp, old, adv, mask)
    off, _ = multi_conv_dapo_loss(lp, old, adv, mask, behaviour_logprobs=old - 5.0)
    huge_cap, _ = multi_conv_dapo_loss(lp, old, adv, mask, behaviour_logprobs=old, tis_cap=10.0)  # weights 1
    assert off.item() == plain.item() and huge_cap.item() == pytest.approx(plain.item()) and "tis_weight" not in m
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        multi_conv_dapo_loss(lp, old, adv, mask, tis_cap=2.0)
