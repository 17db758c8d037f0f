"""The columns of a logged-transition dataset, one row per transition (ReAgent's layout).

A dataset is a directory of Parquet files with these columns; ``action_probability`` is the
logging policy's probability of the logged action (null for a deterministic logger), and the
``possible_*`` columns are boolean masks over the discrete actions.

Parametric actions (recommendation: each row its own candidate set, of any size) replace the
masks by the candidates' features: ``possible_actions_features`` (one feature list per candidate),
``possible_next_actions_features`` (empty only where ``terminal``) and ``action_features``; the
``action`` column is then the logged action's index in ``possible_actions_features``.

Continuous actions (a Box of floats) make ``action`` a list of floats and drop the masks; the
action bounds are the schema's metadata (``ACTION_LOW``, ``ACTION_HIGH``: JSON lists), else the
data's own minima and maxima. ``action_probability`` is then null (a density is no probability).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("mdp_id", pa.string()),
        ("sequence_number", pa.int64()),
        ("state_features", pa.list_(pa.float32())),
        ("action", pa.int64()),
        ("action_probability", pa.float64()),
        ("reward", pa.float64()),
        ("next_state_features", pa.list_(pa.float32())),
        ("terminal", pa.bool_()),
        ("possible_actions", pa.list_(pa.bool_())),
        ("possible_next_actions", pa.list_(pa.bool_())),
        ("time_diff", pa.int64()),
    ]
)
REQUIRED = [name for name in SCHEMA.names if name != "time_diff"]
"""Columns every dataset must have (``time_diff`` is optional)."""

_COMMON = [name for name in REQUIRED if name not in ("possible_actions", "possible_next_actions")]
PARAMETRIC_SCHEMA = pa.schema(
    [
        *(SCHEMA.field(name) for name in _COMMON),
        ("action_features", pa.list_(pa.float32())),
        ("possible_actions_features", pa.list_(pa.list_(pa.float32()))),
        ("possible_next_actions_features", pa.list_(pa.list_(pa.float32()))),
    ]
)
PARAMETRIC_REQUIRED = PARAMETRIC_SCHEMA.names
"""Columns every parametric-action dataset must have (told apart by ``action_features``)."""

_FLOAT_ACTION = pa.field("action", pa.list_(pa.float32()))
CONTINUOUS_SCHEMA = pa.schema([_FLOAT_ACTION if name == "action" else SCHEMA.field(name) for name in _COMMON])
CONTINUOUS_REQUIRED = CONTINUOUS_SCHEMA.names
"""Columns every continuous-action dataset must have (told apart by ``action``'s list type)."""
ACTION_LOW, ACTION_HIGH = b"distrl.action_low", b"distrl.action_high"
"""Schema metadata keys of a continuous dataset's per-dimension action bounds."""
