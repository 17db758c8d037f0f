"""Join the JAX processes described by a Topology (``python -m distrl.launch.jax`` starts them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distrl import extras
from distrl.errors import UserError
from distrl.extras import require_extra
from distrl.launch.topology import Topology

if TYPE_CHECKING:
    from distrl.comm.jax_comm import JaxComm


def connect_jax(topology: Topology, timeout_s: float) -> JaxComm:
    """``jax.distributed.initialize`` with the launcher's coordinator (its service bound to that
    address, not every interface); a lone process gets a one-device JaxComm."""
    require_extra(*extras.JAX)
    import jax

    from distrl.comm.jax_comm import JaxComm

    if topology.is_distributed:
        if topology.launcher != "jax":
            raise UserError(
                f"ml_framework: jax across processes needs distrl's JAX launcher, not {topology.launcher}: "
                "python -m distrl.launch.jax --nproc_per_node=N -m distrl.train ... --ml-framework jax",
                code="launch-jax-needs-jax-launcher",
            )
        coordinator = f"{topology.master_addr}:{topology.master_port}"
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=topology.world_size,
            process_id=topology.rank,
            coordinator_bind_address=coordinator,
            initialization_timeout=int(timeout_s),
        )
    return JaxComm()
