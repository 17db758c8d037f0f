"""Collection: what steps envs with a policy and hands back segments (rollouts for PPO and A2C,
transitions for DQN and SAC), on a rank over its own envs or on a Ray env worker over its part
of them, through one protocol and one builder (``collect.base``), with the action noise that
makes both collect the same."""
