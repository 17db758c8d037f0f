"""V-trace (Espeholt et al. 2018, "IMPALA", section 4.1): value targets and policy-gradient
advantages for samples acted by an older policy ``mu`` than the one learnt, ``pi``.

With importance ratios ``rho_t = pi(a_t|x_t) / mu(a_t|x_t)``, truncated as
``rho_t' = min(rho_bar, rho_t)`` and ``c_t = lambda * min(c_bar, rho_t)``:

    delta_t = rho_t' * (r_t + gamma * V(x_{t+1}) - V(x_t))
    v_t - V(x_t) = delta_t + gamma * c_t * (v_{t+1} - V(x_{t+1}))       (the paper's remark 1)
    advantage_t = rho_t' * (r_t + gamma * v_{t+1} - V(x_t))                (its policy gradient)

Nothing flows back past a step that ends an episode; a truncated episode carries
``gamma * V(final observation)`` in its reward, as ``storage.rollout.compute_gae`` expects.
On-policy (every ``rho_t`` 1) with ``lambda`` 1, the targets are GAE(1)'s returns and the advantages
GAE(1)'s.
"""

from __future__ import annotations

import torch


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    trace_lambda: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v, advantages)`` over a ``[steps, envs]`` rollout; ``log_rhos`` is ``log pi - log mu`` of
    the actions taken, ``last_values`` ``[envs]`` the values after the last step. No gradient
    flows through either result."""
    with torch.no_grad():
        rhos = log_rhos.exp()
        clipped_rhos = rhos.clamp(max=rho_bar)
        traces = trace_lambda * rhos.clamp(max=c_bar)
        discounts = gamma * (1.0 - dones)
        next_values = torch.cat([values[1:], last_values.unsqueeze(0)])
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        corrections = torch.empty_like(values)
        correction = torch.zeros_like(last_values)
        for t in reversed(range(values.shape[0])):
            correction = deltas[t] + discounts[t] * traces[t] * correction
            corrections[t] = correction
        targets = values + corrections
        next_targets = torch.cat([targets[1:], last_values.unsqueeze(0)])
        advantages = clipped_rhos * (rewards + discounts * next_targets - values)
    return targets, advantages
