"""The one exception type for mistakes a user can fix (bad config, bad flags, missing files).

The command line turns it into a single line on stderr and exit code 2; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


class PeerFailure(Exception):
    """A collective failed: another rank died, hung past the process-group timeout, or the
    network between ranks broke. Reported as one line; the process exits with code 3."""


class CollectiveMismatch(RuntimeError):
    """Two ranks entered a sum with different sizes or dtypes: a bug in the caller, not the peer."""
