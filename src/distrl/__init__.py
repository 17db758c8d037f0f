"""distrl: distributed reinforcement learning, from one CPU process to torchrun and SLURM."""

__version__ = "0.1.0"

from distrl.moved import install as _find_moved_modules

_find_moved_modules()
