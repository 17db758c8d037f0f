"""Evaluation: deterministic episodes with a policy (``episodes``), and a checkpoint's deployable
policy read back through the algorithm registry (``policy``)."""
