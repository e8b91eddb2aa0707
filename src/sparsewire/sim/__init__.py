"""Cluster-scale simulation: modelled networks (:mod:`.network`), a max-min fair flow solver
(:mod:`.flows`), the predicted time of a communication plan (:mod:`.plans`) and the NetSparse
in-network mechanisms (:mod:`.netsparse`)."""
