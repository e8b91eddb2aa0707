"""A size check before any reader or generator allocates a matrix: a size line of 10^12 x 10^12 or
``stencil3d:2000`` must be one clear error, not a MemoryError traceback or tens of GB taken."""

from __future__ import annotations

import os

from sparsewire.errors import InputError

__all__ = [
    "check_dense_fits",
    "check_archive_fits",
    "check_fits",
    "check_derived_fits",
    "serial_planning_bytes",
    "physical_memory_bytes",
    "available_memory_bytes",
]

#: Bytes a matrix costs while it is built, per stored entry and per row: coordinates and values
#: while they are generated or parsed (two int64 indices, one float64) and the CSR made from them
#: (an int64 or int32 index and a float64), plus the row pointer, which the conversions (COO to
#: CSR, transposes, duplicates summed) hold up to four times at once (measured by fuzzing under a
#: memory limit: two copies were not enough).
BYTES_PER_ENTRY = 2 * (8 + 8 + 8)
BYTES_PER_ROW = 4 * 8
#: Bytes per pair of ranks that planning P ranks in one process (``analyze``, ``advise``,
#: ``simulate``, ``build_plan``) holds at its peak: every rank's box for every rank (measured:
#: 6.7 GB at P = 20,000 and 0.5 GB at P = 5,000, ``analyze stencil2d:10``; 24 leaves a margin).
BYTES_PER_RANK_PAIR = 24


def physical_memory_bytes() -> int:
    """Not collective. This machine's physical memory (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def available_memory_bytes() -> int:
    """Not collective. About what this process may still allocate: the memory the OS reports
    available (``MemAvailable``; the physical memory where that is unknown), or less where a
    resource limit (``ulimit -d`` / ``-v``: RLIMIT_DATA, RLIMIT_AS) leaves less above what the
    process already uses; 0 when nothing is known."""
    limits = [_meminfo_available() or physical_memory_bytes()]
    try:
        import resource

        used = _process_status_bytes()
        for kind, field in ((resource.RLIMIT_DATA, "VmData"), (resource.RLIMIT_AS, "VmSize")):
            soft, _ = resource.getrlimit(kind)
            if soft != resource.RLIM_INFINITY:
                limits.append(max(int(soft) - used.get(field, 0), 1))
    except (ImportError, ValueError, OSError):
        pass
    known = [limit for limit in limits if limit > 0]
    return min(known) if known else 0


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _process_status_bytes() -> dict[str, int]:
    """VmData and VmSize of this process (Linux /proc/self/status), in bytes; empty elsewhere."""
    sizes = {}
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name in ("VmData", "VmSize"):
                    sizes[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return sizes


def check_fits(rows: int, cols: int, entries: int, what: str) -> None:
    """Not collective. Raise InputError when building a ``rows`` x ``cols`` matrix with about
    ``entries`` stored entries would need more than this process may allocate
    (:func:`available_memory_bytes`: ``entries * BYTES_PER_ENTRY + rows * BYTES_PER_ROW`` bytes);
    ``what`` names the file or spec."""
    needed = max(0, entries) * BYTES_PER_ENTRY + max(0, rows) * BYTES_PER_ROW
    _refuse_above(
        needed,
        f"{what}: a {rows} x {cols} matrix with about {entries} entries needs about {{needed}} to build",
        "use a smaller size",
    )


def check_archive_fits(archive, what: str) -> None:
    """Not collective. Raise InputError when the arrays of an opened ``.npz`` (a NumPy ``NpzFile``)
    would take more than this process may allocate (:func:`available_memory_bytes`) once read:
    their sizes as the archive declares them, so a compressed file that unpacks to terabytes is
    refused before it is read."""
    declared = sum(info.file_size for info in archive.zip.infolist())
    _refuse_above(declared, f"{what}: its arrays take {{needed}} once unpacked", "give a smaller file")


def check_dense_fits(rows: int, k: int, itemsize: int, what: str) -> None:
    """Not collective. Raise InputError when dense blocks of ``rows`` rows of ``k`` columns of
    ``itemsize`` bytes (B, C and the message buffers of one rank, summed over them) would need
    more than this process may allocate: a ``k`` of 2^31 from a damaged plan file or a typo is one
    error before the executor allocates, not a MemoryError traceback."""
    needed = max(0, int(rows)) * max(0, int(k)) * max(1, int(itemsize))
    _refuse_above(needed, f"{what}: blocks of {rows} rows x k = {k} columns need {{needed}}", "use a smaller k")


def check_derived_fits(needed: int, what: str, fix: str) -> None:
    """Not collective. Raise InputError ``<what> needs N GiB, more than ...; <fix>`` when ``needed`` bytes,
    a size the arguments imply (``--k`` times the rows of B and C, ``--ranks`` squared for planning in one
    process, a network's widths times the nodes), exceed what this process may allocate. ``what`` and
    ``fix`` name the arguments as the caller's interface spells them (flags or parameters)."""
    _refuse_above(int(needed), f"{what} needs {{needed}}", fix)


def serial_planning_bytes(n_ranks: int) -> int:
    """Not collective. About the peak bytes of planning ``n_ranks`` ranks in one process (``P^2 * BYTES_PER_RANK_PAIR``)."""
    return int(n_ranks) ** 2 * BYTES_PER_RANK_PAIR


def _refuse_above(needed: int, problem: str, fix: str) -> None:
    """The one refusal of every check here: InputError ``<problem>, more than the N GiB this
    process may use; <fix>`` when ``needed`` bytes exceed :func:`available_memory_bytes`
    (``{needed}`` in ``problem`` becomes the size in GiB)."""
    available = available_memory_bytes()
    if available and needed > available:
        size = f"{needed / 2**30:.1f} GiB"
        raise InputError(f"{problem.format(needed=size)}, more than the {available / 2**30:.1f} GiB this process may use; {fix}")
