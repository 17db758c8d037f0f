import os
from dataclasses import replace

from distrl.launch.process_group import AUTO_SPIN_S, sync_spin_s
from distrl.launch.topology import Topology

NODE = Topology(launcher="torchrun", rank=0, local_rank=0, world_size=2, local_world_size=2)


def test_explicit_spin_time_wins() -> None:
    assert sync_spin_s(NODE, 3.0) == 0.003
    assert sync_spin_s(NODE, 0.0) == 0.0


def test_ranks_spin_only_while_each_has_a_core() -> None:
    cores = len(os.sched_getaffinity(0))
    assert sync_spin_s(replace(NODE, local_world_size=cores), None) == AUTO_SPIN_S
    assert sync_spin_s(replace(NODE, local_world_size=cores + 1), None) == 0.0
