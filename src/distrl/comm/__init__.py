"""The communicator: a framework-neutral part the shared loop uses (``base.Comm``: barrier, sums
of a few numbers, bytes, run-on-main) and one part per ML framework for tensors and gradients
(``torch_comm``; ``jax_comm``, imported only by JAX runs). Nothing outside these modules and
``distrl.launch`` talks to torch.distributed or jax.distributed."""

from distrl.comm.base import Comm
from distrl.comm.torch_comm import TorchComm, TorchGroupComm

__all__ = ["Comm", "TorchComm", "TorchGroupComm"]
