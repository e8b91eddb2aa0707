"""A small real network on one machine: nodes as Linux network namespaces joined by rate-limited
veth links, MPICH over TCP between them (:mod:`sparsewire.testing.emulation.cluster`)."""
