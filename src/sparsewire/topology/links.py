"""The link constants the planner's cost model uses when nothing was measured: the ``nodes:G``
topology (and ``Topology.from_mpi``) and the ``flat`` one. Each is (bandwidth in bytes per second
per rank and direction, latency in seconds, per-message overhead in seconds).

Where they come from: they are assumed round figures, not measurements of any machine.
``network`` is 12.5 GB/s, the signalling rate of one 100 Gbit/s port (EDR InfiniBand, 100 GbE)
with 2 us latency and 2 us per message; ``shared-memory`` is 50 GB/s with 1 us and 0.5 us, the
order of a node's memory bandwidth shared by its ranks. The named machines of
:data:`sparsewire.topology.presets.PRESETS` take their bandwidths from the papers' machines instead.
``sparsewire calibrate --network`` measures a machine's links and writes a record that
``--topology FILE`` reads (:meth:`~sparsewire.topology.model.Topology.from_record`): predictions
under these constants price an assumed cluster, and the tables that print them say so
(:attr:`~sparsewire.topology.model.Topology.assumed_links`).
"""

from __future__ import annotations

__all__ = ["SHARED_MEMORY", "NETWORK", "FLAT_NETWORK"]

#: Inside a node: (bandwidth B/s, latency s, overhead s); assumed, see the module docstring.
SHARED_MEMORY = (50e9, 1e-6, 0.5e-6)
#: Between nodes (a proxy-based link): assumed, see the module docstring.
NETWORK = (12.5e9, 2e-6, 2e-6)
#: The one link class of the ``flat`` topology: assumed, see the module docstring.
FLAT_NETWORK = (12.5e9, 2e-6, 1e-6)
