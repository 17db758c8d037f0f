"""Launch layer: topology discovery and process-group set-up; the only code aware of launchers."""

from distrl.launch.process_group import connect, resolve_device
from distrl.launch.topology import SINGLE_PROCESS, Topology, discover_topology

__all__ = ["SINGLE_PROCESS", "Topology", "connect", "discover_topology", "resolve_device"]
