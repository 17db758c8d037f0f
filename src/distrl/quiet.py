"""Third-party output that says nothing to a distrl user (an exporter's progress lines, warnings
about code paths distrl chose on purpose), silenced where it arises unless ``--verbose``."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

VERBOSE_ENV = "DISTRL_VERBOSE"
"""Set by ``--verbose`` (``cli.main``), so the processes a command starts show it all too."""


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


@contextlib.contextmanager
def quiet(*loggers: str) -> Iterator[None]:
    """Inside: Python warnings ignored, and the named loggers (``torch.onnx``) at ERROR only;
    unless ``--verbose``, which shows everything."""
    if verbose():
        yield
        return
    levels = {name: logging.getLogger(name).level for name in loggers}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in loggers:
                logging.getLogger(name).setLevel(logging.ERROR)
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
