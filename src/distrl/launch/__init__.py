"""Launch layer: how this process started and how it meets its peers. Topology discovery
(torchrun, SLURM, the file rendezvous, the JAX launcher, or alone), process-group and
network-interface set-up, jax.distributed, preemption signals, and the file-rendezvous and JAX
launchers' own process starting (one supervisor). Nothing of Ray: Ray mode, whose driver hands
its learners their ``Topology`` as data, is ``distrl.ray``."""
