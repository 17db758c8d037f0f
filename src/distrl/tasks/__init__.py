"""Sequence tasks: what a sequence policy (GRPO) learns from, as envs are for PPO and DQN. A
task is a source of prompts, each with its answer (``prompts``), the tokenizer that turns text
into token ids (``tokenizer``), and reward functions that score a completion (``verifiers``)."""
