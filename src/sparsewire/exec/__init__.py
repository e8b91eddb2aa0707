"""The executor: runs plans over MPI. Importing :mod:`sparsewire.exec.spmm` initialises MPI."""
