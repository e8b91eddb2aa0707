"""Cluster-scale simulation, without MPI: modelled networks (:mod:`~sparsewire.sim.network`, built by
:mod:`~sparsewire.sim.network_builders`), a max-min fair flow solver (:mod:`~sparsewire.sim.flows`),
the predicted time of a communication plan (:mod:`~sparsewire.sim.plan_timing`) and the NetSparse
in-network mechanisms (:mod:`~sparsewire.sim.netsparse`)."""
