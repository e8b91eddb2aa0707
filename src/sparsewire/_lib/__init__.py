"""Private helpers with no domain knowledge: cache-line aligned arrays, core counts and thread
pools, size checks, distinct sorted keys, parallel sorting, bit packing, plain-text tables and
floating-point error bounds. NumPy and Numba only; nothing here knows about matrices being
distributed, plans or MPI."""
