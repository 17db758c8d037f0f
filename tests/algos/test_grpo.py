"""GRPO's formulas against hand-computed values: group advantages, the KL estimators, and the
clipped loss with both normalisations; the first step's ratio is exactly one."""

from __future__ import annotations

import math

import pytest
import torch

from distrl.algos.grpo import GRPO, entropy_coefficient, group_advantages, kl_estimate, token_log_probs
from distrl.algos.grpo_config import GRPOConfig, TransformerConfig
from distrl.models.transformer import TransformerLM
from distrl.storage.completions import CompletionBatch


def test_group_advantages_match_hand_computed_values() -> None:
    rewards = torch.tensor(
        [[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [3.0, 1.0, 2.0, 2.0]], dtype=torch.float64
    )
    mean = group_advantages(rewards, "mean", scale_by_std=False)
    assert mean.tolist() == [[0.5, -0.5, -0.5, 0.5], [0.0] * 4, [1.0, -1.0, 0.0, 0.0]]
    # Leave-one-out: r_i minus the mean of the other three.
    loo = group_advantages(rewards, "leave_one_out", scale_by_std=False)
    expected = [[1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3], [0.0] * 4, [3 - 5 / 3, 1 - 7 / 3, 2 - 2, 2 - 2]]
    torch.testing.assert_close(loo, torch.tensor(expected, dtype=torch.float64))
    scaled = group_advantages(rewards, "mean", scale_by_std=True)
    std = math.sqrt(((0.5**2) * 4) / 3)  # the unbiased std of [1, 0, 0, 1]
    torch.testing.assert_close(
        scaled[0], torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64) / (std + 1e-6)
    )
    assert scaled[1].tolist() == [0.0] * 4  # equal rewards: exactly zero, even scaled
    # 0.1 three times has a mean that is not exactly 0.1 in floats: still exactly zero.
    assert group_advantages(torch.full((1, 3), 0.1), "mean", False).tolist() == [[0.0] * 3]


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_match_their_formulas(estimator: str) -> None:
    cfg = GRPOConfig(kl_estimator=estimator, kl_input_clamp=5.0, kl_output_clamp=3.0)
    log_p = torch.tensor([-1.0, -2.0, -0.5, -10.0], dtype=torch.float64)
    log_ref = torch.tensor([-1.5, -1.0, -0.5, -0.1], dtype=torch.float64)
    log_r = (log_ref - log_p).clamp(-5.0, 5.0)  # the last one, 9.9, is clamped to 5
    by_hand = {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": log_r.exp() - 1 - log_r}[estimator].clamp(-3.0, 3.0)
    torch.testing.assert_close(kl_estimate(log_p, log_ref, cfg), by_hand)
    assert kl_estimate(log_p, log_p, cfg).abs().max() == 0.0


def tiny_batch() -> tuple[TransformerLM, CompletionBatch]:
    torch.manual_seed(0)
    net = TransformerLM(8, TransformerConfig(layers=1, width=16, heads=2, context=8)).double()
    sequences = torch.tensor([[0, 3, 4, 5, 6, 1], [2, 3, 4, 7, 1, 0], [2, 3, 4, 2, 2, 2]])
    attention = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    completion_mask = attention[:, 3:].clone()
    advantages = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    return net, CompletionBatch(sequences, attention, completion_mask, advantages)


@pytest.mark.parametrize("new_tokens", [3, 1])
def test_completions_of_one_prompt_feed_it_once_with_the_same_log_probs_and_grads(new_tokens: int) -> None:
    """Rows 2 and 3 of the tiny batch share their prompt: fed once, its keys and values copied,
    they get the numbers each row fed alone (with no row to share with) gets."""
    results, fed = [], {}
    for together in (True, False):
        net, whole = tiny_batch()
        keep = whole.sequences.shape[1] - whole.new_tokens + new_tokens  # the first new_tokens
        batch = CompletionBatch(
            whole.sequences[:, :keep], whole.attention_mask[:, :keep], whole.completion_mask[:, :new_tokens],
            whole.advantages,
        )  # fmt: skip
        shapes = fed.setdefault(together, [])
        net.register_forward_pre_hook(lambda _, args, shapes=shapes: shapes.append(tuple(args[0].shape)))
        parts = [batch] if together else [batch.rows(torch.tensor([row])) for row in range(len(batch))]
        outputs = [token_log_probs(net, part, temperature=0.7, pad_id=0) for part in parts]
        log_probs, entropy = (torch.cat(values) for values in zip(*outputs, strict=True))
        (log_probs * batch.advantages[:, None] + 0.1 * entropy).sum().backward()
        results.append([log_probs, entropy, *(p.grad for p in net.parameters())])
    # Two distinct prompts, then the completions' tokens but the last on the copied cache; alone,
    # each row's prompt and completion, up to its own last token but one.
    lengths = batch.completion_mask.sum(1).tolist()
    assert fed[True] == ([(2, 3), (3, max(lengths) - 1)] if new_tokens > 1 else [(2, 3)])
    assert fed[False] == [(1, 3 + length - 1) for length in lengths]
    for together, alone in zip(*results, strict=True):
        torch.testing.assert_close(together, alone, atol=1e-12, rtol=0)


def test_a_long_completion_is_fed_on_alone_past_the_others() -> None:
    """One completion of six tokens among ones of one and two: the columns the short ones read
    are fed for all, the rest for the long one alone, with the numbers each row fed alone gets."""
    torch.manual_seed(1)
    net = TransformerLM(8, TransformerConfig(layers=2, width=16, heads=2, context=12)).double()
    prompt = [2, 3, 4]
    completions = [[5, 6, 7, 5, 6, 1], [1, 0, 0, 0, 0, 0], [6, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]]
    sequences = torch.tensor([prompt + row for row in completions])
    completion_mask = torch.tensor(
        [[1] * 6, [1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]]
    ).bool()
    attention = torch.cat([torch.ones(4, 3, dtype=torch.bool), completion_mask], 1)
    batch = CompletionBatch(sequences, attention, completion_mask, torch.tensor([1.0, -1.0, 0.5, -0.5]))
    results, shapes = [], []
    for parts in ([batch], [batch.rows(torch.tensor([row])) for row in range(4)]):
        net.zero_grad()
        hook = net.register_forward_pre_hook(lambda _, args: shapes.append(tuple(args[0].shape)))
        log_probs, entropy = (
            torch.cat(values)
            for values in zip(*(token_log_probs(net, part, 0.7, pad_id=0) for part in parts), strict=True)
        )
        hook.remove()
        (log_probs * batch.advantages[:, None] + 0.1 * entropy).sum().backward()
        results.append([log_probs, entropy, *(p.grad.clone() for p in net.parameters())])
    # The prompt once, the first completion column for all four, the other four for the long one.
    assert shapes[:3] == [(1, 3), (4, 1), (1, 4)]
    assert bool((results[0][0][~completion_mask] == 0).all())
    for together, alone in zip(*results, strict=True):
        torch.testing.assert_close(together, alone, atol=1e-12, rtol=0)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_loss_matches_the_clipped_surrogate_by_hand(normalization: str, weighted: bool) -> None:
    """Asynchronous GRPO's importance weights (``weighted``) multiply the surrogate, not the KL
    penalty or the entropy bonus."""
    net, batch = tiny_batch()
    cfg = GRPOConfig(
        ratio_clip_min=0.1,
        ratio_clip_max=0.3,
        loss_normalization=normalization,
        kl_coef=0.25,
        kl_estimator="k1",
        entropy_coef=0.05,
    )
    log_probs, entropy = token_log_probs(net, batch, cfg.temperature, pad_id=0)
    log_probs, entropy = log_probs.detach(), entropy.tolist()
    # Ratios 1.5 (clipped at 1.3 when the advantage is positive), 0.8 (below 0.9), 1.0.
    log_ratios = torch.log(
        torch.tensor([[1.5, 0.8, 1.0], [1.5, 0.8, 1.0], [1.5, 0.8, 1.0]], dtype=torch.float64)
    )
    batch.old_log_probs = log_probs - log_ratios
    batch.reference_log_probs = log_probs - 0.2  # k1 = log p - log ref = 0.2 per token
    importance = [[0.5, 2.0, 1.0], [1.5, 0.25, 1.0], [2.0, 1.0, 0.75]] if weighted else [[1.0] * 3] * 3
    if weighted:
        batch.importance_weights = torch.tensor(importance, dtype=torch.float64)
    loss, weight, _ = GRPO(net, cfg, pad_id=0).loss(batch)
    per_token = []
    for row in range(3):
        a = float(batch.advantages[row])
        values = []
        for t, r in enumerate((1.5, 0.8, 1.0)):
            clipped = min(max(r, 0.9), 1.3)
            surrogate = -min(r * a, clipped * a) * importance[row][t]
            values.append(surrogate + 0.25 * 0.2 - 0.05 * entropy[row][t])
        per_token.append(values)
    mask = batch.completion_mask.tolist()
    kept = [[v for v, m in zip(vs, ms, strict=True) if m] for vs, ms in zip(per_token, mask, strict=True)]
    if normalization == "token":
        tokens = sum(len(values) for values in kept)
        expected = sum(sum(values) for values in kept) / tokens
        assert weight == tokens == 8
    else:
        expected = sum(sum(values) / len(values) for values in kept) / 3
        assert weight == 3
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-12)


def test_the_first_step_ratio_is_exactly_one() -> None:
    net, batch = tiny_batch()
    algo = GRPO(net, GRPOConfig(), pad_id=0)
    batch.old_log_probs = algo.log_probs(net, batch)
    stats = algo.update(batch, [[torch.arange(3)]])
    assert stats["approx_kl"] == 0.0 and stats["clip_fraction"] == 0.0
    # And the step changed the policy: the same batch now has ratios away from one.
    _, _, terms = algo.loss(batch)
    assert float(terms["approx_kl"]) > 0.0


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_micro_batches_step_as_the_whole_minibatch(normalization: str) -> None:
    """Gradient accumulation: 2 or 3 micro-batches (completions of different lengths) end with the
    parameters one pass over the minibatch gives, to 1e-6."""
    cfg = GRPOConfig(loss_normalization=normalization, learning_rate=0.05)
    params = []
    for steps in (1, 2, 3):
        net, batch = tiny_batch()
        algo = GRPO(net, cfg, pad_id=0, accumulation_steps=steps)
        batch.old_log_probs = algo.log_probs(net, batch) - 0.1  # ratios off one: the clip matters
        start = torch.cat([p.detach().reshape(-1).clone() for p in net.parameters()])
        algo.update(batch, [[torch.arange(3)]])
        params.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    assert (params[0] - start).abs().max() > 1e-3
    for accumulated in params[1:]:
        torch.testing.assert_close(accumulated, params[0], atol=1e-6, rtol=0)


def test_the_entropy_floor_raises_the_bonus_in_proportion_up_to_its_cap() -> None:
    cfg = GRPOConfig(entropy_coef=0.03, entropy_target=0.15, entropy_boost_max=10.0)
    assert entropy_coefficient(cfg, 0.3) == 0.03  # above the floor: unchanged
    assert entropy_coefficient(cfg, 0.05) == pytest.approx(0.09)  # 0.15 / 0.05 = 3x
    assert entropy_coefficient(cfg, 0.001) == pytest.approx(0.3)  # 150x capped at 10x
    assert entropy_coefficient(GRPOConfig(entropy_coef=0.03), 0.001) == 0.03  # no floor set


@pytest.mark.parametrize("budget", [1, 9, 64], ids=["one-a-row", "some-a-row", "all-in-one-row"])
def test_packed_sequences_give_the_padded_log_probs_and_grads(budget: int) -> None:
    """Prompts and completions of mixed lengths packed into rows of ``budget`` tokens: the
    numbers of the padded pass, each row alone (no sequence sees another)."""
    torch.manual_seed(2)
    net = TransformerLM(8, TransformerConfig(layers=2, width=16, heads=2, context=12)).double()
    prompts = [[0, 0, 2, 3], [2, 3, 4, 5], [0, 4, 4, 3], [0, 0, 0, 6]]
    completions = [[5, 6, 7, 1, 0], [1, 0, 0, 0, 0], [6, 2, 1, 0, 0], [3, 3, 3, 3, 3]]
    completion_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [1] * 5]).bool()
    sequences = torch.tensor([p + c for p, c in zip(prompts, completions, strict=True)])
    attention = torch.cat([torch.tensor(prompts) > 0, completion_mask], 1)
    batch = CompletionBatch(sequences, attention, completion_mask, torch.tensor([1.0, -1.0, 0.5, -0.5]))
    results, fed = [], []
    for packed_tokens in (None, budget):
        net.zero_grad()
        hook = net.register_forward_pre_hook(lambda _, args: fed.append(tuple(args[0].shape)))
        log_probs, entropy = token_log_probs(net, batch, 0.7, pad_id=0, packed_tokens=packed_tokens)
        hook.remove()
        (log_probs * batch.advantages[:, None] + 0.1 * entropy).sum().backward()
        results.append([log_probs, entropy, *(p.grad.clone() for p in net.parameters())])
    # Tokens fed a row: 2+3, 4+0, 3+2 and 1+4, in rows of the budget or the longest, 5.
    assert fed[-1] == {1: (4, 5), 9: (3, 9), 64: (1, 64)}[budget]
    for padded, packed in zip(*results, strict=True):
        torch.testing.assert_close(packed, padded, atol=1e-12, rtol=0)
