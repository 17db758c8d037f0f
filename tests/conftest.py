"""Session-wide fixtures."""

from tests.ray_cluster import ray_head

__all__ = ["ray_head"]
