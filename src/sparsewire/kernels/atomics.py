"""An atomic counter for the Numba kernels (:mod:`sparsewire.kernels.numba_csr`).

Numba has no atomic operations in compiled code; the threaded CSR product hands out row chunks
through :func:`fetch_add` so that a thread that finishes its own share early takes chunks of a
slower thread's share (work stealing).
"""

from __future__ import annotations

from sparsewire._lib.jit import cgutils, intrinsic, types


@intrinsic
def fetch_add(typingctx, array, index, value):
    """Atomically ``old = array[index]; array[index] += value``; returns ``old`` (``array``: 1-D
    int64, C-contiguous). No ordering beyond the counter itself (monotonic): each value is
    returned to exactly one caller, which is all a work counter needs; the data the chunks write
    is ordered by the end of the parallel region."""
    if not (isinstance(array, types.Array) and array.dtype == types.int64 and array.ndim == 1):
        return None

    def codegen(context, builder, sig, args):
        view = context.make_array(sig.args[0])(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, sig.args[0], view, [args[1]])
        increment = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.atomic_rmw("add", pointer, increment, "monotonic")

    return types.int64(array, types.intp, value), codegen
