"""CPE estimators against numbers worked out by hand, a contextual bandit and a small MDP whose
true values are known exactly, and logs without propensities."""

from __future__ import annotations

import numpy as np
import pytest

from distrl.errors import UserError
from distrl.ope.estimators import (
    Bootstrap,
    Episodes,
    EvaluationSteps,
    cpe_metrics,
    direct_method,
    doubly_robust,
    inverse_propensity_score,
    sequential_doubly_robust,
    weighted_doubly_robust,
)

FEW = Bootstrap(resamples=20)


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def draw(probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of ``probabilities`` [rows, actions]."""
    return (rng.random((len(probabilities), 1)) < probabilities.cumsum(axis=1)).argmax(axis=1)


# ------------------------------------------------------------------------------ by hand
def test_one_step_estimators_by_hand() -> None:
    rewards = np.array([1.0, 0.0])
    mu, pi = np.array([0.5, 0.25]), np.array([1.0, 0.5])
    q_logged, target_value = np.array([0.5, 0.5]), np.array([0.6, 0.4])
    ips = inverse_propensity_score(rewards, mu, pi, FEW)
    assert ips.estimate == pytest.approx((2 * 1 + 2 * 0) / 2)
    assert ips.normalized == pytest.approx(1.0 / 0.5)  # over the logger's mean reward
    assert direct_method(rewards, target_value, FEW).estimate == pytest.approx(0.5)
    # (0.6 + 2 (1 - 0.5) + 0.4 + 2 (0 - 0.5)) / 2
    assert doubly_robust(rewards, mu, pi, q_logged, target_value, FEW).estimate == pytest.approx(0.5)


def two_episodes() -> EvaluationSteps:
    """Episode A: 2 steps, rho = 2, 1; episode B: 1 step, rho = 0.5 (rows shuffled, ids strings)."""
    return EvaluationSteps(
        mdp_id=np.array(["b", "a", "a"]),
        sequence_number=np.array([0, 1, 0]),
        rewards=np.array([3.0, 1.0, 1.0]),
        logging_propensity=np.array([0.8, 0.5, 0.25]),
        target_probability=np.array([0.4, 0.5, 0.5]),
        reward_model_logged=np.array([2.5, 0.9, 1.1]),
        reward_model_target=np.array([1.2, 0.8, 0.6]),
        value_model_logged=np.array([2.0, 0.5, 1.0]),
        value_model_target=np.array([1.5, 0.2, 0.7]),
    )


def test_sequential_estimators_by_hand() -> None:
    episodes = Episodes.from_steps(two_episodes())
    np.testing.assert_allclose(episodes.importance_ratio, [[2.0, 1.0], [0.5, 1.0]])  # B padded with 1
    gamma = 0.5
    # SDR, backwards. A: t=1: 0.2 + 1 (1 + 0 - 0.5) = 0.7; t=0: 0.7 + 2 (1 + 0.5 * 0.7 - 1) = 1.4.
    # B: 1.5 + 0.5 (3 - 2) = 2.0.
    sdr = sequential_doubly_robust(episodes, gamma, FEW)
    assert sdr.estimate == pytest.approx((1.4 + 2.0) / 2)
    assert sdr.normalized == pytest.approx(1.7 / ((1 + 0.5 * 1 + 3) / 2))  # mean discounted return
    # WDR: cumulative ratios A 2, 2 and B 0.5, 0.5 -> weights 0.8, 0.2 at both steps; w_{-1} = 1/2.
    # t=0: 0.8 (1 - 1) + 0.2 (3 - 2) + 0.5 * 0.7 + 0.5 * 1.5 = 1.3
    # t=1: 0.8 (1 - 0.5) + 0.2 (0 - 0) + 0.8 * 0.2 + 0.2 * 0 = 0.56, discounted by 0.5
    assert weighted_doubly_robust(episodes, gamma, FEW).estimate == pytest.approx(1.3 + 0.5 * 0.56)


def test_weights_of_very_long_episodes_do_not_overflow() -> None:
    """Cumulative ratios of 2^2000 are far beyond float64; WDR only needs their shares."""
    steps = 2000
    episodes = Episodes(
        rewards=np.ones((2, steps)),
        importance_ratio=np.array([[2.0] * steps, [2.0] * (steps - 1) + [0.0]]),
        q_logged=np.zeros((2, steps)),
        target_value=np.zeros((2, steps)),
    )
    # Halves until the last step, where episode 2's weight drops to 0: sum_t gamma^t.
    assert weighted_doubly_robust(episodes, 1.0, FEW).estimate == pytest.approx(steps)


def test_intervals_hold_their_estimate_and_follow_the_seed() -> None:
    steps = two_episodes()
    first = cpe_metrics(steps, 0.9, Bootstrap(50, seed=3))
    assert first == cpe_metrics(steps, 0.9, Bootstrap(50, seed=3))
    for name in ("ips", "dm", "dr", "sdr", "wdr"):
        assert first[f"cpe/{name}_ci_low"] <= first[f"cpe/{name}"] <= first[f"cpe/{name}_ci_high"]
    assert first != cpe_metrics(steps, 0.9, Bootstrap(50, seed=4))


# ------------------------------------------------------------------------------ without propensities
def test_rows_and_episodes_without_propensity_are_left_out_and_counted() -> None:
    steps = two_episodes()
    deterministic_a = np.where(steps.mdp_id == "a", np.nan, steps.logging_propensity)
    partial = cpe_metrics(EvaluationSteps(**{**vars(steps), "logging_propensity": deterministic_a}), 0.5, FEW)
    assert partial["cpe/rows_without_propensity"] == 2 and partial["cpe/episodes_without_propensity"] == 1
    only_b = cpe_metrics(EvaluationSteps(*(v[steps.mdp_id == "b"] for v in vars(steps).values())), 0.5, FEW)
    for name in ("ips", "dr", "sdr", "wdr"):
        assert partial[f"cpe/{name}"] == pytest.approx(only_b[f"cpe/{name}"])
    assert partial["cpe/dm"] == pytest.approx(steps.reward_model_target.mean())  # DM: all rows


def test_a_deterministic_logger_cannot_be_importance_weighted() -> None:
    steps = two_episodes()
    with pytest.raises(UserError, match="IPS needs the logging policy's propensities but no row has one"):
        cpe_metrics(EvaluationSteps(**{**vars(steps), "logging_propensity": np.full(3, np.nan)}), 0.5)


# ------------------------------------------------------------------------------ contextual bandit
# 10 contexts drawn uniformly, 4 actions, Bernoulli rewards with context-dependent means; the
# logger and the target are stochastic with known probabilities, so the target's true value is
# the mean over contexts of sum_a pi(a|x) r(x, a).
_world = np.random.default_rng(2024)
REWARD_MEAN = _world.uniform(0.0, 1.0, (10, 4))
LOGGING = softmax(0.5 * _world.normal(size=(10, 4)))
TARGET = softmax(4.0 * REWARD_MEAN)  # favours the better actions
TRUE_BANDIT_VALUE = float((TARGET * REWARD_MEAN).sum(axis=1).mean())


def log_bandit(rows: int, seed: int, q_hat: np.ndarray) -> dict[str, np.ndarray]:
    """``rows`` logged decisions and the model ``q_hat`` [context, action]'s values for them."""
    rng = np.random.default_rng(seed)
    context = rng.integers(len(REWARD_MEAN), size=rows)
    action = draw(LOGGING[context], rng)
    return {
        "rewards": rng.binomial(1, REWARD_MEAN[context, action]).astype(float),
        "logging_propensity": LOGGING[context, action],
        "target_probability": TARGET[context, action],
        "q_logged": q_hat[context, action],
        "target_value": (TARGET * q_hat).sum(axis=1)[context],
    }


def test_ips_is_unbiased_and_its_intervals_cover_the_truth() -> None:
    estimates, covered = [], 0
    for seed in range(50):
        log = log_bandit(1000, seed, REWARD_MEAN)
        ips = inverse_propensity_score(log["rewards"], log["logging_propensity"], log["target_probability"])
        estimates.append(ips.estimate)
        covered += ips.ci_low <= TRUE_BANDIT_VALUE <= ips.ci_high
    standard_error = np.std(estimates) / np.sqrt(len(estimates))
    assert abs(np.mean(estimates) - TRUE_BANDIT_VALUE) < 3 * standard_error
    assert covered >= 42  # 95% intervals: about 47.5 of 50 expected


@pytest.mark.parametrize("model", ["close", "biased"])
def test_doubly_robust_is_within_5_percent_whatever_the_model(model: str) -> None:
    rng = np.random.default_rng(7)
    q_hat = {
        "close": REWARD_MEAN + rng.normal(0.0, 0.05, REWARD_MEAN.shape),
        "biased": 1.0 - REWARD_MEAN,  # ranks the actions backwards
    }[model]
    log = log_bandit(20_000, seed=1, q_hat=q_hat)
    dr = doubly_robust(**log)
    assert dr.estimate == pytest.approx(TRUE_BANDIT_VALUE, rel=0.05)
    dm = direct_method(log["rewards"], log["target_value"])
    if model == "biased":  # the direct method is only as right as its model
        assert dm.estimate != pytest.approx(TRUE_BANDIT_VALUE, rel=0.2)
        assert not dm.ci_low <= TRUE_BANDIT_VALUE <= dm.ci_high


# ------------------------------------------------------------------------------ tabular MDP
# 3 states, 2 actions, discount 0.9; every step ends the episode with probability at least 0.2.
# The target policy's true value is d0 (I - gamma P_pi)^-1 r_pi by dynamic programming.
STATES, ACTIONS, GAMMA = 3, 2, 0.9
_mdp = np.random.default_rng(11)
_to_states = _mdp.dirichlet(np.ones(STATES), (STATES, ACTIONS))
END = 0.2 + 0.3 * _mdp.random((STATES, ACTIONS))
TRANSITION = _to_states * (1.0 - END)[..., None]  # [state, action, next state]; the rest ends
REWARD = _mdp.uniform(0.0, 1.0, (STATES, ACTIONS))
START = np.full(STATES, 1.0 / STATES)
MDP_LOGGING = softmax(_mdp.normal(size=(STATES, ACTIONS)))
MDP_TARGET = softmax(3.0 * _mdp.normal(size=(STATES, ACTIONS)))
V_TARGET = np.linalg.solve(
    np.eye(STATES) - GAMMA * np.einsum("sa,san->sn", MDP_TARGET, TRANSITION),
    (MDP_TARGET * REWARD).sum(axis=1),
)
Q_TARGET = REWARD + GAMMA * TRANSITION @ V_TARGET
TRUE_MDP_VALUE = float(START @ V_TARGET)
MDP_TOLERANCE = 0.05
"""SDR and WDR within 5% of the truth on 10,000 logged episodes (docs/algorithms/ope.md)."""


def log_episodes(episodes: int, seed: int, q_hat: np.ndarray) -> EvaluationSteps:
    """``episodes`` episodes of the logging policy, rewards with N(0, 0.1) noise, rows shuffled;
    the value model is ``q_hat``, the reward model the true mean rewards."""
    rng = np.random.default_rng(seed)
    state = draw(np.tile(START, (episodes, 1)), rng)
    running = np.arange(episodes)
    columns: dict[str, list[np.ndarray]] = {"mdp_id": [], "sequence_number": [], "state": [], "action": []}
    for t in range(200):  # (1 - 0.2)^200: no episode is still running by then
        action = draw(MDP_LOGGING[state], rng)
        for name, value in (("mdp_id", running), ("sequence_number", np.full(len(running), t))):
            columns[name].append(value)
        columns["state"].append(state)
        columns["action"].append(action)
        outcome = draw(np.concatenate([TRANSITION[state, action], END[state, action][:, None]], 1), rng)
        going_on = outcome < STATES
        running, state = running[going_on], outcome[going_on]
        if not len(running):
            break
    mdp_id, sequence, state, action = (np.concatenate(columns[c]) for c in columns)
    shuffle = rng.permutation(len(state))
    mdp_id, sequence, state, action = mdp_id[shuffle], sequence[shuffle], state[shuffle], action[shuffle]
    return EvaluationSteps(
        mdp_id=mdp_id,
        sequence_number=sequence,
        rewards=REWARD[state, action] + rng.normal(0.0, 0.1, len(state)),
        logging_propensity=MDP_LOGGING[state, action],
        target_probability=MDP_TARGET[state, action],
        reward_model_logged=REWARD[state, action],
        reward_model_target=(MDP_TARGET * REWARD).sum(axis=1)[state],
        value_model_logged=q_hat[state, action],
        value_model_target=(MDP_TARGET * q_hat).sum(axis=1)[state],
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequential_estimators_find_the_true_value_of_a_small_mdp(seed: int) -> None:
    noisy_q = Q_TARGET + np.random.default_rng(100 + seed).normal(0.0, 0.1, Q_TARGET.shape)
    episodes = Episodes.from_steps(log_episodes(10_000, seed, noisy_q))
    for estimator in (sequential_doubly_robust, weighted_doubly_robust):
        estimate = estimator(episodes, GAMMA)
        assert estimate.estimate == pytest.approx(TRUE_MDP_VALUE, rel=MDP_TOLERANCE), estimator.__name__
        assert estimate.ci_low <= TRUE_MDP_VALUE <= estimate.ci_high, estimator.__name__
