"""Ray mode (``distrl train --launcher ray``): the driver, the Ray instance it runs on, the
virtual cluster's placement, the learners and the worker groups beside them (env, eval and data
workers, and an algorithm's own: GRPO's verifier and prompt workers), their retries and failure
causes, and ``distrl status``. Nothing is imported here."""
