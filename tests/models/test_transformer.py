"""The sequence policy: cached decoding equals uncached decoding, padding changes nothing, and
activation checkpointing keeps the gradients while saving less."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from distrl.algos.grpo import token_log_probs
from distrl.algos.grpo_config import TransformerConfig
from distrl.models.generate import Sampling, filter_scaled_logits, generate, left_padded, policy_log_softmax
from distrl.models.transformer import TransformerLM, one_query_attention
from distrl.storage.completions import CompletionBatch
from distrl.tasks.tokenizer import CharTokenizer
from tests.helpers import DEVICES

TOKENIZER = CharTokenizer("0123456789rev =")
PROMPTS = ["rev 1=", "rev 98765=", "rev 42="]


def model(seed: int = 0, **sizes: int) -> TransformerLM:
    torch.manual_seed(seed)
    # Larger initial weights than GPT-2's, so an untrained model's choices depend on its input.
    net = TransformerLM(
        TOKENIZER.vocab_size,
        TransformerConfig(**{"layers": 2, "width": 32, "heads": 4, "context": 32, **sizes}),
    )
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(20.0 if p.dim() > 1 else 1.0)
    return net


def prompts(texts: list[str], device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    return left_padded([TOKENIZER.encode(t, "test") for t in texts], TOKENIZER.pad_id, torch.device(device))


def completions_of(
    net: TransformerLM,
    texts: list[str],
    use_cache: bool,
    sampling: Sampling,
    seeds=None,
    copies: int = 1,
    keep_log_probs: bool = True,
    max_new_tokens: int = 10,
):
    tokens, mask = prompts(texts, next(net.parameters()).device)
    eos, pad = TOKENIZER.eos_id, TOKENIZER.pad_id
    return generate(
        net, tokens, mask, max_new_tokens, eos, pad, sampling, seeds, use_cache, copies, keep_log_probs
    )


def log_probs_of(net: TransformerLM, done) -> torch.Tensor:
    batch = CompletionBatch(*done.sequences(), done.mask, torch.zeros(done.tokens.shape[0]))
    with torch.no_grad():
        return token_log_probs(net, batch, temperature=0.7, pad_id=TOKENIZER.pad_id)[0] * done.mask


@pytest.mark.parametrize(
    "sampling",
    [Sampling(), Sampling(temperature=0.7, top_k=5), Sampling(top_p=0.8)],
    ids=["t1", "topk", "topp"],
)
@pytest.mark.parametrize("device", DEVICES)
def test_cached_and_uncached_decoding_give_the_same_tokens_and_log_probabilities(
    sampling: Sampling, device: str
) -> None:
    net = model().to(device)
    seeds = [11, 12, 13]
    cached = completions_of(net, PROMPTS, True, sampling, seeds)
    uncached = completions_of(net, PROMPTS, False, sampling, seeds)
    assert torch.equal(cached.tokens, uncached.tokens)
    assert torch.equal(cached.mask, uncached.mask)
    assert cached.mask.sum() > len(PROMPTS)  # more than one token each: the cache was used
    torch.testing.assert_close(log_probs_of(net, cached), log_probs_of(net, uncached), atol=1e-5, rtol=0)
    greedy_cached = completions_of(net, PROMPTS, True, Sampling())
    assert torch.equal(greedy_cached.tokens, completions_of(net, PROMPTS, False, Sampling()).tokens)


def test_a_completion_does_not_depend_on_its_batch_or_padding() -> None:
    net = model(1)
    together = completions_of(net, PROMPTS, True, Sampling(), seeds=[5, 6, 7])
    alone = completions_of(net, PROMPTS[:1], True, Sampling(), seeds=[5])
    width = alone.tokens.shape[1]
    assert torch.equal(together.tokens[0, :width], alone.tokens[0])
    # Different seeds give different samples (the noise is per row, not shared).
    other = completions_of(net, PROMPTS[:1], True, Sampling(), seeds=[99])
    assert not torch.equal(other.tokens[0], alone.tokens[0])


def test_a_completions_noise_does_not_depend_on_how_many_are_drawn_or_how_long_they_may_grow() -> None:
    net, seeds = model(3), [41, 42, 43]
    two = completions_of(net, PROMPTS, True, Sampling(), seeds, copies=2)
    three = completions_of(net, PROMPTS, True, Sampling(), seeds, copies=3, max_new_tokens=12)
    width = two.tokens.shape[1]
    for prompt in range(len(PROMPTS)):
        for draw in range(2):
            assert torch.equal(three.tokens[3 * prompt + draw, :width], two.tokens[2 * prompt + draw])


@pytest.mark.parametrize("device", DEVICES)
def test_copies_of_a_prompt_share_its_prefix_and_equal_the_uncached_reference(device: str) -> None:
    net, sampling, seeds = model(2).to(device), Sampling(temperature=0.7), [21, 22, 23]
    fed = []
    hook = net.register_forward_pre_hook(lambda _, args: fed.append(args[0].shape[0]))
    cached = completions_of(net, PROMPTS, True, sampling, seeds, copies=4)
    hook.remove()
    assert fed[:2] == [3, 12]  # each prompt once, then each of its 4 completions
    # Each step feeds the completions still going (those with a token at that step), and ended
    # ones only until they are a quarter of those fed.
    going = [int(n) for n in cached.mask[:, 1:].sum(0) if n > 0]
    assert len(fed) == 1 + len(going) and min(fed[1:]) < 12
    assert all(n <= rows < 4 / 3 * n for rows, n in zip(fed[1:], going, strict=True))
    uncached = completions_of(net, PROMPTS, False, sampling, seeds, copies=4)
    assert torch.equal(cached.tokens, uncached.tokens)
    assert torch.equal(cached.prompts, prompts(PROMPTS, cached.prompts.device)[0].repeat_interleave(4, 0))
    torch.testing.assert_close(log_probs_of(net, cached), log_probs_of(net, uncached), atol=1e-5, rtol=0)
    # Each copy draws its own noise, and copy j is the same whatever else is generated with it.
    assert len({tuple(row) for row in cached.tokens.tolist()}) > len(PROMPTS)
    alone = completions_of(net, PROMPTS[1:2], True, sampling, seeds[1:2], copies=2)
    assert torch.equal(alone.tokens, cached.tokens[4:6])
    # A model whose cache cannot be copied row by row is fed each prompt once per completion.
    net.repeatable_cache = False
    assert torch.equal(completions_of(net, PROMPTS, True, sampling, seeds, copies=4).tokens, cached.tokens)


@pytest.mark.parametrize("copies", [1, 4])
@pytest.mark.parametrize("seeds", [[31, 32, 33], None], ids=["sampled", "greedy"])
@pytest.mark.parametrize("device", DEVICES)
def test_generation_keeps_the_log_probabilities_and_entropies_the_loss_pass_computes(
    copies: int, seeds: list[int] | None, device: str
) -> None:
    net, sampling = model(2).double().to(device), Sampling(temperature=0.7, top_k=5)
    done = completions_of(net, PROMPTS, True, sampling, seeds, copies=copies)
    if seeds is not None:
        assert done.mask.sum() > len(PROMPTS) * copies and not done.mask.all()  # several tokens; some ended
    without = completions_of(net, PROMPTS, True, sampling, seeds, copies=copies, keep_log_probs=False)
    assert torch.equal(without.tokens, done.tokens) and without.log_probs is None and without.entropy is None
    batch = CompletionBatch(
        *done.sequences(), done.mask, torch.zeros(done.tokens.shape[0], dtype=torch.float64, device=device)
    )
    with torch.no_grad():
        log_probs, entropy = token_log_probs(net, batch, temperature=0.7, pad_id=TOKENIZER.pad_id)
    # The policy's own distribution at the temperature, not the top-k one it was sampled from.
    torch.testing.assert_close(done.log_probs, log_probs, atol=1e-10, rtol=0)
    torch.testing.assert_close(done.entropy, entropy * done.mask, atol=1e-10, rtol=0)
    assert done.log_probs.dtype == torch.float64 and bool((done.entropy[~done.mask] == 0).all())


@pytest.mark.parametrize("keys", [1, 7, 16, 40])
def test_one_query_attention_is_torchs(keys: int) -> None:
    generator = torch.Generator().manual_seed(keys)
    q, k, v = (torch.randn(6, 2, n, 8, generator=generator, dtype=torch.float64) for n in (1, keys, keys))
    allowed = torch.rand(6, 1, 1, keys, generator=generator) > 0.4
    allowed[..., -1] = True  # a query attends to itself at least
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(one_query_attention(q, k, v, allowed), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("vocab", [5, 15, 16, 40])
def test_the_policy_log_softmax_of_a_small_vocabulary_is_the_plain_one(vocab: int) -> None:
    logits = torch.randn(7, 3, vocab, dtype=torch.float64)
    expected = (logits / 0.7).index_fill(-1, torch.tensor([1]), -torch.inf).log_softmax(-1)
    assert torch.equal(policy_log_softmax(logits, 0.7, pad_id=1).isinf(), expected.isinf())
    torch.testing.assert_close(policy_log_softmax(logits, 0.7, pad_id=1), expected, atol=1e-12, rtol=0)


def test_padding_is_never_generated() -> None:
    net = model(3)
    with torch.no_grad():  # the output layer is the embedding: make padding every row's favourite
        net.token_embedding.weight[TOKENIZER.pad_id] = 50.0 * net.final_norm(net.token_embedding.weight).mean(
            0
        )
    for seeds in (None, [1, 2, 3]):
        done = completions_of(net, PROMPTS, True, Sampling(), seeds)
        assert done.mask.any() and not (done.tokens[done.mask] == TOKENIZER.pad_id).any()
    log_probs = log_probs_of(net, done)
    assert torch.isfinite(log_probs).all()


def test_top_k_and_top_p_keep_the_expected_tokens() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    assert torch.isfinite(filter_scaled_logits(logits, Sampling(top_k=2))).tolist() == [
        [True, True, False, False]
    ]
    # 0.5 + 0.25 reaches 0.7: the third is not needed.
    assert torch.isfinite(filter_scaled_logits(logits, Sampling(top_p=0.7))).tolist() == [
        [True, True, False, False]
    ]
    assert torch.isfinite(filter_scaled_logits(logits, Sampling(top_p=0.8))).tolist() == [
        [True, True, True, False]
    ]


def _saved_bytes(
    net: TransformerLM, tokens: torch.Tensor, mask: torch.Tensor
) -> tuple[int, list[torch.Tensor]]:
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel() * t.element_size())
        return t

    net.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, _ = net(tokens, mask)
    logits.square().mean().backward()
    return sum(saved), [p.grad.clone() for p in net.parameters()]


def test_activation_checkpointing_keeps_gradients_and_saves_less() -> None:
    net = model(2, layers=4)
    tokens, mask = prompts(PROMPTS * 8)
    plain_bytes, plain_grads = _saved_bytes(net, tokens, mask)
    net.activation_checkpointing = True
    checkpointed_bytes, checkpointed_grads = _saved_bytes(net, tokens, mask)
    assert checkpointed_bytes <= plain_bytes / 2, (checkpointed_bytes, plain_bytes)
    for plain, checkpointed in zip(plain_grads, checkpointed_grads, strict=True):
        torch.testing.assert_close(checkpointed, plain, atol=1e-6, rtol=0)
