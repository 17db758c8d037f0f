"""The failures distrl reports as one line, and the one mapping from them to exit statuses.

A mistake the user can fix (bad config, bad flags, missing files) exits with 2; a failed
collective with 3. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """A problem with the user's input, reported as one line without a traceback.

    ``code`` is the refusal's stable id (kebab-case, prefixed by its area: ``config-``, ``env-``,
    ``ray-`` ...), each listed on docs/troubleshooting.md under "Every refusal, by id": every
    refusal in distrl names one (``tests/test_troubleshooting_ids.py``); a plug-in's own may not.
    ``str(exc)`` and ``exc.args[0]`` stay the message alone. A UserError re-raised from another
    passes the other's ``code`` on."""

    code: str | None

    def __init__(self, message: str | UserError, *, code: str | None = None) -> None:
        if isinstance(message, UserError):
            # Rebuilt from an instance, as gymnasium's AsyncVectorEnv re-raises an env
            # process's error (``exctype(value)``): the message and id are the instance's.
            code = code or message.code
            message = message.args[0]
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own pickling calls ``type(self)(*self.args)``, which loses the code: Ray and
        # multiprocessing send UserErrors between processes.
        return (_user_error, (type(self), self.args[0], self.code), self.__dict__)


def _user_error(cls: type[UserError], message: str, code: str | None) -> UserError:
    return cls(message, code=code)


class PeerFailure(Exception):
    """A collective failed: another rank died, hung past the process-group timeout, or the
    network between ranks broke. Reported as one line; the process exits with code 3."""


class CollectiveMismatch(RuntimeError):
    """Two ranks entered a sum with different sizes or dtypes: a bug in the caller, not the peer."""


REPORTED = (UserError, PeerFailure, CollectiveMismatch)
"""The failures every entry point (the command line, a Ray learner, the JAX launcher) reports as
one line with ``exit_status``."""


def exit_status(failure: Exception) -> int:
    """The process's exit status for a ``REPORTED`` failure: 2 for the user's input, 3 for a
    collective that failed (a peer died or hung, or two ranks disagreed)."""
    return 2 if isinstance(failure, UserError) else 3
