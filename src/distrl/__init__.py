"""distrl: distributed reinforcement learning, from one CPU process to torchrun and SLURM."""

__version__ = "0.1.0"
