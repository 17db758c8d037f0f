"""Collection: what steps envs with a policy and hands back segments (rollouts for PPO,
transitions for DQN), on a rank over its own envs or on a Ray env worker over its part of them,
with the action noise that makes both collect the same."""
