"""Load: every way a matrix gets in, as a SciPy CSR array.

:func:`load_matrix` reads Matrix Market, edge lists, METIS graphs and ``.npz`` files
(:mod:`~sparsewire.io.readers`), builds generator specs such as ``rmat:14:8:1`` or ``stencil2d:64``
(:mod:`~sparsewire.io.generators`), and finds the matrices shipped with the package by name
(:mod:`~sparsewire.io.shipped`). Text lines are parsed by :mod:`~sparsewire.io.text_lines` and
archives checked by :mod:`~sparsewire.io.archives`. OGB's node-property datasets are read from their raw files
into a cache read by rows (:mod:`~sparsewire.io.ogb`). Needs no MPI.
"""

from sparsewire.io.generators import GENERATORS, from_spec
from sparsewire.io.ogb import OgbCache, is_ogb_directory, open_ogb
from sparsewire.io.readers import load_matrix, read_edge_list, read_matrix_market, read_metis_graph, read_npz

__all__ = [
    "load_matrix",
    "read_matrix_market",
    "read_edge_list",
    "read_metis_graph",
    "read_npz",
    "from_spec",
    "GENERATORS",
    "open_ogb",
    "is_ogb_directory",
    "OgbCache",
]
