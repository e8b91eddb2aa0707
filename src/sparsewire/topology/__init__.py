"""The machine as data: which ranks share a fast link (:class:`Topology`: levels of groups, each
with a :class:`LinkClass` that prices a message), the named presets and their link constants
(:mod:`~sparsewire.topology.links`), and the calibration records that measured topologies are read
from (:mod:`~sparsewire.topology.records`). Reads records, runs nothing; needs no MPI to import.
"""

from sparsewire.topology.model import Level, LinkClass, Topology
from sparsewire.topology.presets import PRESETS, Machine, parse_topology

__all__ = ["Topology", "Level", "LinkClass", "Machine", "parse_topology", "PRESETS"]
