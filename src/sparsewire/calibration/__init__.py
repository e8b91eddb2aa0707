"""Measuring the machine: the local kernel's rate (:mod:`~sparsewire.calibration.compute`), the links
between ranks (:mod:`~sparsewire.calibration.network`) and the device transfer paths
(:mod:`~sparsewire.calibration.transfer`). Each writes a record of the calibration cache; the objects
those records build read them where they live (:mod:`sparsewire.topology.records`,
:mod:`sparsewire.wire.transfer_records`). The names below load MPI on first use."""

from sparsewire._lib.lazy import lazy_exports

__all__ = ["measure_compute_rate", "measure_network", "measure_transfer_paths", "time_transfer_paths"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "measure_compute_rate": "sparsewire.calibration.compute",
        "measure_network": "sparsewire.calibration.network",
        "measure_transfer_paths": "sparsewire.calibration.transfer",
        "time_transfer_paths": "sparsewire.calibration.transfer",
    },
)
