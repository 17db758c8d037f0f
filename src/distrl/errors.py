"""The failures distrl reports as one line, and the one mapping from them to exit statuses.

A mistake the user can fix (bad config, bad flags, missing files) exits with 2; a failed
collective with 3. Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


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
