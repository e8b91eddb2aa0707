"""The NetSparse paper's reproduction (MICRO'25): the workload and machine model
(:mod:`~sparsewire.sim.netsparse.workload`), the per-request pipeline compiled with Numba
(:mod:`~sparsewire.sim.netsparse.request_streams`), the request-issue (RIG) stage
(:mod:`~sparsewire.sim.netsparse.rig`), the software baselines
(:mod:`~sparsewire.sim.netsparse.baselines`) and the simulator of the in-network mechanisms
(:mod:`~sparsewire.sim.netsparse.simulator`)."""
