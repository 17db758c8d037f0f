"""Counterfactual policy evaluation (CPE): estimate what a target policy would earn from data a
logging policy collected, before deploying it. Pure numpy; notation as in the papers.

Per logged step i: reward r_i, the logger's probability mu_i of the logged action a_i (its
propensity; NaN for a deterministic logger), the target policy's probability pi_i of a_i, the
model's q-hat(x_i, a_i), and the model's value of the target policy V-hat(x_i) =
sum_a pi(a|x_i) q-hat(x_i, a). The estimators take the model's numbers as arrays, whatever the
model: for the one-step ones it predicts immediate rewards (a reward model r-hat), for the
sequential ones discounted returns (a value model such as a Q-network).

One-step (contextual bandit) estimators treat every row as its own decision:

- IPS: mean of (pi_i / mu_i) r_i; unbiased whenever mu > 0 wherever pi > 0.
- DM: mean of V-hat(x_i); as good as the model (its bias is the model's).
- DR (Dudik et al. 2011): mean of V-hat(x_i) + (pi_i / mu_i)(r_i - q-hat(x_i, a_i)); unbiased
  if either the propensities or the model are right, with less variance than IPS when the model
  is close.

Sequential estimators value whole episodes (grouped by ``mdp_id``, ordered by
``sequence_number``) with discount gamma and per-step ratios rho_t = pi_t / mu_t:

- SDR (Jiang & Li 2016): per episode, backwards from V_DR = 0 after the last step,
  V_DR <- V-hat(s_t) + rho_t (r_t + gamma V_DR - q-hat(s_t, a_t)); the mean over episodes.
- WDR (Thomas & Brunskill 2016): the same terms unrolled, sum_t gamma^t [w_t (r_t - q-hat_t) +
  w_{t-1} V-hat_t], with the cumulative ratio rho_0 ... rho_t of each episode normalised over
  the episodes at every step t into w_t (w_{-1} = 1/n): biased but consistent, with far less
  variance than SDR when cumulative ratios are extreme.

Every estimate comes with a percentile bootstrap confidence interval (rows resampled for the
one-step estimators, whole episodes for the sequential ones) and, as ReAgent reports them,
normalised by the logging policy's empirical value on the same data (mean reward, or mean
discounted return): above 1, the target policy is estimated to beat the logger. The value is the
one over the logged horizon: an episode cut off by the end of the log counts up to its last row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from distrl.errors import UserError

ESTIMATORS = ("ips", "dm", "dr", "sdr", "wdr")
"""Metric names of the estimators, in the order they are reported."""


@dataclass(frozen=True)
class Estimate:
    estimate: float
    ci_low: float
    ci_high: float
    normalized: float
    """``estimate`` over the logging policy's empirical value on the same data (NaN when that is 0)."""


@dataclass(frozen=True)
class Bootstrap:
    """How confidence intervals are drawn: percentile bootstrap with its own seeded generator per
    estimate, so an estimate's interval does not depend on which others were computed before it."""

    resamples: int = 200
    confidence: float = 0.95
    seed: int = 0


DEFAULT_BOOTSTRAP = Bootstrap()
"""200 resamples, 95% intervals, seed 0."""


@dataclass(frozen=True)
class EvaluationSteps:
    """One entry per logged step: what the log, the logger, the target policy and the two models
    say about it (ReAgent's ``EvaluationDataPage``): a reward model for the one-step estimators
    and a value model for the sequential ones."""

    mdp_id: np.ndarray
    sequence_number: np.ndarray
    rewards: np.ndarray
    logging_propensity: np.ndarray
    """mu_i, the logger's probability of the logged action; NaN where the logger was deterministic."""
    target_probability: np.ndarray
    """pi_i, the target policy's probability of the logged action."""
    reward_model_logged: np.ndarray
    """r-hat(x_i, a_i), the reward model's immediate reward of the logged action (DM, DR)."""
    reward_model_target: np.ndarray
    """sum_a pi(a|x_i) r-hat(x_i, a), the reward model's immediate reward of the target policy (DM, DR)."""
    value_model_logged: np.ndarray
    """q-hat(x_i, a_i), the value model's discounted return of the logged action (SDR, WDR)."""
    value_model_target: np.ndarray
    """V-hat(x_i) = sum_a pi(a|x_i) q-hat(x_i, a), the value model's value of the target policy (SDR, WDR)."""


@dataclass(frozen=True)
class Episodes:
    """Logged episodes side by side as [episodes, longest episode] arrays. After its last step an
    episode rests in an absorbing state: reward, q-hat and V-hat 0 and ratio 1 (both policies
    act alike there), so SDR adds nothing for it and WDR keeps its full weight in the
    normalisation of later steps."""

    rewards: np.ndarray
    importance_ratio: np.ndarray
    """rho_t = pi_t / mu_t; NaN at steps without a propensity."""
    q_logged: np.ndarray
    target_value: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)

    def take(self, episodes: np.ndarray) -> Episodes:
        return Episodes(*(getattr(self, f.name)[episodes] for f in fields(self)))

    def discounted_returns(self, gamma: float) -> np.ndarray:
        """Each episode's logged discounted return: the logging policy's value, one sample each."""
        return self.rewards @ gamma ** np.arange(self.rewards.shape[1])

    @staticmethod
    def from_steps(steps: EvaluationSteps) -> Episodes:
        """Group steps by ``mdp_id`` and order them by ``sequence_number`` (rows may come in any order)."""
        order = np.lexsort((steps.sequence_number, steps.mdp_id))
        _, episode, lengths = np.unique(steps.mdp_id[order], return_inverse=True, return_counts=True)
        first_step = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        position = np.arange(len(order)) - first_step[episode]

        def padded(per_step: np.ndarray, after_the_end: float) -> np.ndarray:
            out = np.full((len(lengths), lengths.max()), after_the_end)
            out[episode, position] = per_step[order]
            return out

        return Episodes(
            rewards=padded(steps.rewards, 0.0),
            importance_ratio=padded(steps.target_probability / steps.logging_propensity, 1.0),
            q_logged=padded(steps.value_model_logged, 0.0),
            target_value=padded(steps.value_model_target, 0.0),
        )


# ------------------------------------------------------------------------------ one-step estimators
def inverse_propensity_score(
    rewards: np.ndarray,
    logging_propensity: np.ndarray,
    target_probability: np.ndarray,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> Estimate:
    """IPS: the mean of (pi_i / mu_i) r_i over rows with a propensity."""
    logged = _rows_with_propensity(logging_propensity, "IPS")
    ratio = target_probability[logged] / logging_propensity[logged]
    return _mean_estimate(ratio * rewards[logged], rewards[logged], bootstrap)


def direct_method(
    rewards: np.ndarray, target_value: np.ndarray, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> Estimate:
    """DM: the mean of the model's V-hat(x_i) over all rows (no propensities needed)."""
    return _mean_estimate(target_value, rewards, bootstrap)


def doubly_robust(
    rewards: np.ndarray,
    logging_propensity: np.ndarray,
    target_probability: np.ndarray,
    q_logged: np.ndarray,
    target_value: np.ndarray,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> Estimate:
    """DR (Dudik et al. 2011): the mean of V-hat(x_i) + (pi_i / mu_i)(r_i - q-hat(x_i, a_i)) over
    rows with a propensity."""
    logged = _rows_with_propensity(logging_propensity, "DR")
    ratio = target_probability[logged] / logging_propensity[logged]
    terms = target_value[logged] + ratio * (rewards[logged] - q_logged[logged])
    return _mean_estimate(terms, rewards[logged], bootstrap)


# ------------------------------------------------------------------------------ sequential estimators
def sequential_doubly_robust(
    episodes: Episodes, gamma: float, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> Estimate:
    """SDR (Jiang & Li 2016) over the episodes with every propensity; whole episodes resampled."""
    episodes = _episodes_with_propensity(episodes, "SDR")
    value = np.zeros(len(episodes))  # V_DR^0: nothing left after the last step
    for t in reversed(range(episodes.rewards.shape[1])):
        value = episodes.target_value[:, t] + episodes.importance_ratio[:, t] * (
            episodes.rewards[:, t] + gamma * value - episodes.q_logged[:, t]
        )
    return _mean_estimate(value, episodes.discounted_returns(gamma), bootstrap)


def weighted_doubly_robust(
    episodes: Episodes, gamma: float, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> Estimate:
    """WDR (Thomas & Brunskill 2016) over the episodes with every propensity; whole episodes
    resampled (the weights are normalised within each resample)."""
    episodes = _episodes_with_propensity(episodes, "WDR")
    # Cumulative ratios rho_0 ... rho_t, each step scaled so its largest is 1: a product of many
    # ratios above 1 overflows float64, the shares WDR needs do not. A ratio of 0 gives log -inf.
    with np.errstate(divide="ignore"):
        log_cumulative = np.cumsum(np.log(episodes.importance_ratio), axis=1)
    largest = log_cumulative.max(axis=0)
    weight = np.exp(log_cumulative - np.where(np.isfinite(largest), largest, 0.0))
    weight_before = np.hstack([np.ones((len(episodes), 1)), weight[:, :-1]])  # w_{-1}: equal shares
    weighted_correction = weight * (episodes.rewards - episodes.q_logged)
    weighted_baseline = weight_before * episodes.target_value
    discount = gamma ** np.arange(weight.shape[1])

    def value(chosen: np.ndarray) -> float:
        """WDR of the episodes ``chosen`` (with repeats): episode i counts ``copies[i]`` times."""
        copies = np.bincount(chosen, minlength=len(episodes)).astype(np.float64)
        per_step = _share(copies @ weighted_correction, copies @ weight) + _share(
            copies @ weighted_baseline, copies @ weight_before
        )
        return float(per_step @ discount)

    return _bootstrapped(value, len(episodes), float(episodes.discounted_returns(gamma).mean()), bootstrap)


def _share(weighted_sum: np.ndarray, total_weight: np.ndarray) -> np.ndarray:
    """Per step, a weighted sum over the total weight; a step no episode's cumulative ratio
    reaches carries no weight at all (0)."""
    return np.divide(weighted_sum, total_weight, out=np.zeros_like(weighted_sum), where=total_weight > 0)


# ------------------------------------------------------------------------------ all of them
def cpe_metrics(
    steps: EvaluationSteps, gamma: float, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> dict[str, float]:
    """Every estimator as flat metric names for a metrics row: ``cpe/<name>``,
    ``cpe/<name>_ci_low``, ``cpe/<name>_ci_high``, ``cpe/<name>_normalized`` for each name in
    ``ESTIMATORS``, and the counts of rows and episodes left out for lack of a propensity."""
    episodes = Episodes.from_steps(steps)
    estimates = {
        "ips": inverse_propensity_score(
            steps.rewards, steps.logging_propensity, steps.target_probability, bootstrap
        ),
        "dm": direct_method(steps.rewards, steps.reward_model_target, bootstrap),
        "dr": doubly_robust(
            steps.rewards,
            steps.logging_propensity,
            steps.target_probability,
            steps.reward_model_logged,
            steps.reward_model_target,
            bootstrap,
        ),
        "sdr": sequential_doubly_robust(episodes, gamma, bootstrap),
        "wdr": weighted_doubly_robust(episodes, gamma, bootstrap),
    }
    metrics = {
        "cpe/rows": float(len(steps.rewards)),
        "cpe/rows_without_propensity": float(np.isnan(steps.logging_propensity).sum()),
        "cpe/episodes": float(len(episodes)),
        "cpe/episodes_without_propensity": float(np.isnan(episodes.importance_ratio).any(axis=1).sum()),
    }
    for name, estimate in estimates.items():
        metrics[f"cpe/{name}"] = estimate.estimate
        metrics[f"cpe/{name}_ci_low"] = estimate.ci_low
        metrics[f"cpe/{name}_ci_high"] = estimate.ci_high
        metrics[f"cpe/{name}_normalized"] = estimate.normalized
    return metrics


# ------------------------------------------------------------------------------ shared pieces
def _mean_estimate(terms: np.ndarray, logged_outcomes: np.ndarray, bootstrap: Bootstrap) -> Estimate:
    """An estimator that is the mean of one term per row (or episode), normalised by the mean of
    what the logger got on the same rows (or episodes)."""
    return _bootstrapped(
        lambda chosen: float(terms[chosen].mean()), len(terms), float(logged_outcomes.mean()), bootstrap
    )


def _bootstrapped(
    statistic: Callable[[np.ndarray], float], count: int, logged_value: float, bootstrap: Bootstrap
) -> Estimate:
    """``statistic`` of all ``count`` rows or episodes, with the percentile interval of it over
    ``bootstrap.resamples`` resamples of them drawn with replacement."""
    rng = np.random.default_rng(bootstrap.seed)
    resampled = [statistic(rng.integers(count, size=count)) for _ in range(bootstrap.resamples)]
    tail = (1.0 - bootstrap.confidence) / 2.0
    ci_low, ci_high = np.quantile(resampled, [tail, 1.0 - tail])
    estimate = statistic(np.arange(count))
    normalized = estimate / logged_value if logged_value != 0 else float("nan")
    return Estimate(estimate, float(ci_low), float(ci_high), normalized)


def _rows_with_propensity(logging_propensity: np.ndarray, estimator: str) -> np.ndarray:
    return _usable(~np.isnan(logging_propensity), "row", estimator)


def _episodes_with_propensity(episodes: Episodes, estimator: str) -> Episodes:
    usable = _usable(~np.isnan(episodes.importance_ratio).any(axis=1), "episode", estimator)
    return episodes.take(np.flatnonzero(usable))


def _usable(has_propensity: np.ndarray, unit: str, estimator: str) -> np.ndarray:
    if not has_propensity.any():
        raise UserError(
            f"{estimator} needs the logging policy's propensities but no {unit} has one "
            "(action_probability is null: a deterministic logger); log with a stochastic policy, "
            "e.g. distrl collect --policy epsilon-greedy:RUN:EPS",
            code="ope-no-propensities",
        )
    return has_propensity
