"""V-trace against the IMPALA paper's definition written out term by term, and against GAE(1)
on-policy."""

from __future__ import annotations

import pytest
import torch

from distrl.algorithms.appo.vtrace import vtrace
from distrl.storage.rollout import compute_gae

STEPS, ENVS, GAMMA = 7, 3, 0.9


def rollout(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    dones = torch.zeros(STEPS, ENVS, dtype=torch.float64)
    dones[2, 0] = dones[5, 1] = 1.0
    return {
        "rewards": torch.randn(STEPS, ENVS, generator=generator, dtype=torch.float64),
        "values": torch.randn(STEPS, ENVS, generator=generator, dtype=torch.float64),
        "dones": dones,
        "last_values": torch.randn(ENVS, generator=generator, dtype=torch.float64),
    }


def paper_vtrace(
    r: dict[str, torch.Tensor], log_rhos: torch.Tensor, rho_bar: float, c_bar: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation (1) of the paper as a sum, and its policy-gradient advantage, one element at a
    time: v_s = V(x_s) + sum_t (prod_{i<t} gamma_i c_i) delta_t, gamma_i zero past an episode end."""
    values = torch.cat([r["values"], r["last_values"].unsqueeze(0)])
    rhos = log_rhos.exp()
    targets = torch.empty(STEPS + 1, ENVS, dtype=torch.float64)
    targets[STEPS] = r["last_values"]
    for env in range(ENVS):
        for s in range(STEPS):
            total, weight = 0.0, 1.0
            for t in range(s, STEPS):
                discount = GAMMA * (1.0 - float(r["dones"][t, env]))
                delta = min(rho_bar, float(rhos[t, env])) * (
                    float(r["rewards"][t, env]) + discount * float(values[t + 1, env]) - float(values[t, env])
                )
                total += weight * delta
                weight *= discount * lam * min(c_bar, float(rhos[t, env]))
            targets[s, env] = float(values[s, env]) + total
    discounts = GAMMA * (1.0 - r["dones"])
    advantages = rhos.clamp(max=rho_bar) * (r["rewards"] + discounts * targets[1:] - r["values"])
    return targets[:STEPS], advantages


@pytest.mark.parametrize(("rho_bar", "c_bar", "lam"), [(1.0, 1.0, 1.0), (1.5, 0.8, 0.95), (0.5, 2.0, 0.7)])
def test_targets_and_advantages_are_the_papers(rho_bar: float, c_bar: float, lam: float) -> None:
    r = rollout(0)
    # Ratios from 0.2 to 5: both sides of every truncation level above.
    log_rhos = torch.empty(STEPS, ENVS, dtype=torch.float64).uniform_(
        -1.6, 1.6, generator=torch.Generator().manual_seed(1)
    )
    targets, advantages = vtrace(
        **r, log_rhos=log_rhos, gamma=GAMMA, rho_bar=rho_bar, c_bar=c_bar, trace_lambda=lam
    )
    expected_targets, expected_advantages = paper_vtrace(r, log_rhos, rho_bar, c_bar, lam)
    torch.testing.assert_close(targets, expected_targets, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(advantages, expected_advantages, rtol=1e-12, atol=1e-12)


def test_on_policy_with_lambda_1_it_is_gae_1() -> None:
    r = rollout(2)
    targets, advantages = vtrace(**r, log_rhos=torch.zeros(STEPS, ENVS, dtype=torch.float64), gamma=GAMMA)
    gae_advantages, gae_returns = compute_gae(
        r["rewards"], r["values"], r["dones"], r["last_values"], GAMMA, 1.0
    )
    torch.testing.assert_close(targets, gae_returns, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(advantages, gae_advantages, rtol=1e-12, atol=1e-12)


def test_no_gradient_flows_through_the_targets() -> None:
    r = rollout(3)
    values = r["values"].clone().requires_grad_()
    log_rhos = torch.zeros(STEPS, ENVS, dtype=torch.float64, requires_grad=True)
    targets, advantages = vtrace(**{**r, "values": values}, log_rhos=log_rhos, gamma=GAMMA)
    assert not targets.requires_grad and not advantages.requires_grad
