"""The transport layer over mpi4py. Importing :mod:`sparsewire.comm.runtime` initialises MPI."""
