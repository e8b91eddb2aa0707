"""The executor: runs plans over MPI. Importing :mod:`sparsewire.exec.executor` initialises MPI."""
