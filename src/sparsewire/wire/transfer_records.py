"""The transfer calibration records, read: the staging threshold an executor on a device runs with
(:class:`~sparsewire.wire.paths.TransferRule`), from a record that ``sparsewire calibrate --device D``
wrote (:mod:`sparsewire.calibration.transfer` measures it), else the uncalibrated default
(:func:`~sparsewire.wire.paths.default_rule`)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from sparsewire.errors import FallbackWarning, InputError
from sparsewire.topology.records import read_record, record_path
from sparsewire.wire.paths import EVERY_MESSAGE, TransferRule, default_rule, device_type

__all__ = ["TRANSFER_KIND", "default_transfer_record_path", "load_transfer_rule", "transfer_rule"]

#: The ``kind`` of a transfer calibration record.
TRANSFER_KIND = "transfer"


def default_transfer_record_path(device: str) -> Path:
    """Not collective. Where ``sparsewire calibrate --device D`` writes and the executor looks for the
    calibration of D's type: ``transfer-<type>.json`` in :func:`~sparsewire.topology.records.cache_directory`."""
    return record_path(f"transfer-{device_type(device)}")


def load_transfer_rule(path: str | os.PathLike, device: str) -> TransferRule:
    """Not collective. The rule stored in the calibration file at ``path`` for ``device``.

    Raises:
        InputError naming the file and the fix when it is missing, not a transfer calibration,
        of another version, for another device type, or holds no valid threshold.
    """
    path = Path(path)
    rerun = f"rerun 'mpiexec -n 2 sparsewire calibrate --device {device_type(device)} --output {path}'"
    record = read_record(path, TRANSFER_KIND, rerun)
    if record.get("device") != device_type(device):
        raise InputError(f"{path} calibrates device type {record.get('device')!r}, not {device_type(device)!r}; {rerun}")
    threshold = record.get("staged_below_bytes")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise InputError(f"{path}: staged_below_bytes must be a whole number of bytes >= 0 (got {threshold!r}); {rerun}")
    return TransferRule(threshold, f"calibrated in {path} ({record.get('written', 'undated')})")


def transfer_rule(device: str, calibration: str | os.PathLike | None = None) -> TransferRule:
    """Not collective. The rule of an executor on ``device``: from ``calibration`` when given, else
    from :func:`default_transfer_record_path` when that file exists (a damaged one is ignored with a
    :class:`~sparsewire.errors.FallbackWarning`: the cache is ours to rewrite), else :func:`default_rule`;
    always :func:`default_rule`'s (every message staged) where MPI cannot read the device's memory."""
    fallback = default_rule(device)  # the device check comes first
    if fallback.staged_below_bytes >= EVERY_MESSAGE:
        if calibration is not None:  # still refuse a bad file
            load_transfer_rule(calibration, device)
        return fallback  # MPI cannot send from device memory: no threshold applies
    if calibration is not None:
        return load_transfer_rule(calibration, device)
    stored = default_transfer_record_path(device)
    if not stored.exists():
        return fallback
    try:
        return load_transfer_rule(stored, device)
    except InputError as error:  # the cache is ours: a damaged one (a killed calibration) is as good as none
        warnings.warn(
            f"ignoring the damaged stored calibration ({error}); staging as without one. "
            f"'mpiexec -n 2 sparsewire calibrate --device {device_type(device)}' measures a new one",
            FallbackWarning,
            stacklevel=2,
        )
        return fallback
