"""A :class:`~sparsewire.topology.model.Topology` as JSON values and back, every field checked: plan files keep the
topology they were made with, so that a plan made under a measured (``calibrate --network``) or a user-built
topology loads wherever its file goes, without the file or the code that made the topology."""

from __future__ import annotations

import dataclasses
import math

from sparsewire.errors import InputError
from sparsewire.topology.model import Level, LinkClass, Topology

__all__ = ["topology_record", "topology_from_record"]

_POSITIVE, _NON_NEGATIVE, _FRACTION = "a positive number", "a number >= 0", "a number within [0, 1]"
#: Each link field: (may be None, the rule).
_LINK_FIELDS = {
    "bandwidth": (False, _POSITIVE),
    "latency": (False, _NON_NEGATIVE),
    "overhead": (False, _NON_NEGATIVE),
    "burst": (False, _NON_NEGATIVE),
    "aggregate": (True, _POSITIVE),
    "aggregate_burst": (False, _NON_NEGATIVE),
    "relay_seconds": (False, _NON_NEGATIVE),
    "relay_seconds_per_byte": (False, _NON_NEGATIVE),
}
#: Link fields that plan files written before them lack, with the value that means "unknown".
_LINK_DEFAULTS = {"relay_seconds": 0.0, "relay_seconds_per_byte": 0.0}
_RATES = ("local_rate", "copy_rate", "local_rate_alone", "copy_rate_alone")


def topology_record(topology: Topology) -> dict:
    """Not collective. ``topology`` as JSON values (lists for tuples), read back by :func:`topology_from_record`."""
    return json_values(dataclasses.asdict(topology))


def json_values(value):
    """Tuples as lists, recursively (what JSON gives back)."""
    if isinstance(value, dict):
        return {key: json_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_values(item) for item in value]
    return value


def _number(value, rule: str, where: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and {_POSITIVE: value > 0, _NON_NEGATIVE: value >= 0, _FRACTION: 0 <= value <= 1}[rule] if ok else False
    if not ok:
        raise InputError(f"{where} is {value!r}; it must be {rule}{' or null' if optional else ''}")
    return float(value)


def topology_from_record(record, where: str) -> Topology:
    """Not collective. The topology of :func:`topology_record`'s ``record``; a field of the wrong type or out of its
    range is an InputError naming ``where`` and the field."""
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        raise InputError(f"{where}: the topology is not a record with a name")
    name = record["name"]
    levels = record.get("levels")
    if not isinstance(levels, list) or not levels:
        raise InputError(f"{where}: topology {name!r} has no levels")
    built = []
    for i, level in enumerate(levels):
        at = f"{where}: topology {name!r} level {i}"
        if not isinstance(level, dict) or not isinstance(level.get("name"), str) or not isinstance(level.get("link"), dict):
            raise InputError(f"{at} is not a record with a name and a link")
        size = level.get("group_size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
            raise InputError(f"{at}: group_size is {size!r}; it must be a whole number >= 1 or null")
        link = level["link"]
        flags = {key: link.get(key, False) for key in ("proxy_based", "shared")}
        if not isinstance(link.get("name"), str) or not all(isinstance(flag, bool) for flag in flags.values()):
            raise InputError(f"{at}: the link needs a name and true/false proxy_based and shared")
        values = {
            key: _number(link.get(key, _LINK_DEFAULTS.get(key)), rule, f"{at} link {key}", none)
            for key, (none, rule) in _LINK_FIELDS.items()
        }
        built.append(Level(level["name"], size, LinkClass(link["name"], **values, **flags)))
    groups = record.get("rank_groups")
    if groups is not None and (
        not isinstance(groups, list) or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in groups)
    ):
        raise InputError(f"{where}: topology {name!r} rank_groups must be a list of whole numbers >= 0 or null")
    if groups and sorted(set(groups)) != list(range(max(groups) + 1)):
        raise InputError(f"{where}: topology {name!r} rank_groups skip a group; groups are numbered 0, 1, ... without gaps")
    rates = {key: _number(record.get(key), _POSITIVE, f"{where}: topology {name!r} {key}", True) for key in _RATES}
    matrix = record.get("local_rate_matrix")
    if matrix is not None and not isinstance(matrix, str):
        raise InputError(f"{where}: topology {name!r} local_rate_matrix must be a name or null")
    fractions = {
        key: _number(record.get(key), _FRACTION, f"{where}: topology {name!r} {key}", True)
        for key in ("overlap", "piece_overlap")
    }
    try:
        return Topology(
            name, tuple(built), None if groups is None else tuple(groups), **rates, local_rate_matrix=matrix, **fractions
        )
    except InputError as error:
        raise InputError(f"{where}: {error}") from None
