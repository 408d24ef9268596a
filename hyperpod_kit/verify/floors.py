"""The floors a verify run is judged against (issue #28's contract).

`verify_floors.json` (hyperpod_kit/config/facts/, dated and sourced) holds what
`instance_types.json` lacks: all-reduce bus bandwidth per instance type, node count range and
message size, the network bandwidth per type, and the margin (a figure below `margin x floor` is
below its floor). GPUs and EFA interfaces per type come from `instance_types.json`
(`hyperpod_kit.config.facts.instance_type`), never repeated. No row: no floor, never a guess; a
missing table (before it is written) is a table without rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperpod_kit.config import facts

FLOORS_FILE = facts.HERE / "verify_floors.json"
DEFAULT_MARGIN = 1.0  # a table without a margin: the floor itself


class FloorsError(ValueError):
    """The table is not what the contract says: `FILE: key: message`."""


@dataclass(frozen=True)
class Source:
    key: str
    title: str
    url: str | None
    published: str | None
    says: str | None


@dataclass(frozen=True)
class AllReduceFloor:
    instance_type: str
    nodes_min: int
    nodes_max: int
    size_bytes: int
    busbw_gb_s: float
    source: str
    note: str | None = None


@dataclass(frozen=True)
class NodeFloor:
    """What a node of a type must show: GPUs (None: not a GPU type, or unknown) and EFA devices
    (None: the source did not say), from instance_types.json."""

    instance_type: str
    gpus: int | None
    efa_devices: int | None


@dataclass(frozen=True)
class Floors:
    checked: str | None = None
    margin: float = DEFAULT_MARGIN
    margin_reason: str | None = None
    allreduce: tuple[AllReduceFloor, ...] = ()
    network_gbps: dict[str, float] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    file: str = FLOORS_FILE.name

    def allreduce_floor(self, instance_type: str | None, nodes: int) -> AllReduceFloor | None:
        """The row of `instance_type` whose node range holds `nodes`; None without one."""
        if instance_type is None:
            return None
        return next(
            (
                row
                for row in self.allreduce
                if row.instance_type == instance_type and row.nodes_min <= nodes <= row.nodes_max
            ),
            None,
        )


def node_floor(instance_type: str | None) -> NodeFloor | None:
    """GPUs and EFA interfaces of a type from instance_types.json; None for a type it lacks."""
    found = facts.instance_type(instance_type) if instance_type else None
    if found is None or instance_type is None:
        return None
    # a GPU type: its GPUs; a type without accelerators: none; Trainium: not GPUs, no floor
    gpus = found.accelerators if found.accelerator_kind == "gpu" or not found.accelerators else None
    return NodeFloor(instance_type, gpus, found.efa_interfaces)


def instance_types_checked() -> str:
    return facts.instance_types_checked()


def load_floors(path: Path | None = None) -> Floors:
    """The table at `path` (the packaged verify_floors.json by default); a missing file is a
    table without rows. FloorsError for a table that is not the contract's."""
    path = FLOORS_FILE if path is None else path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Floors(file=path.name)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise FloorsError(f"{path}: not JSON ({e})") from None
    try:
        return _floors(data, path.name)
    except (KeyError, TypeError, ValueError) as e:
        raise FloorsError(f"{path}: {e}") from None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{where} is {value!r}, not a number above 0")
    return float(value)


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} is {value!r}, not a whole number above 0")
    return value


def _floors(data: Any, name: str) -> Floors:
    if not isinstance(data, dict):
        raise ValueError("the table is not a JSON object")
    sources = {
        str(key): Source(
            str(key), str(s.get("title", key)), s.get("url"), s.get("published"), s.get("says")
        )
        for key, s in dict(data.get("sources") or {}).items()
    }
    rows = []
    for i, row in enumerate(data.get("allreduce") or []):
        where = f"allreduce[{i}]"
        source = str(row.get("source", ""))
        if source not in sources:
            raise ValueError(f"{where}.source {source!r} is not a key of sources")
        floor = AllReduceFloor(
            str(row["instance_type"]),
            _whole(row["nodes_min"], f"{where}.nodes_min"),
            _whole(row["nodes_max"], f"{where}.nodes_max"),
            _whole(row["size_bytes"], f"{where}.size_bytes"),
            _number(row["busbw_gb_s"], f"{where}.busbw_gb_s"),
            source,
            row.get("note"),
        )
        if floor.nodes_min > floor.nodes_max:
            raise ValueError(f"{where}: nodes_min {floor.nodes_min} > nodes_max {floor.nodes_max}")
        rows.append(floor)
    network = {
        str(k): _number(v["gbps"], f"network.{k}.gbps")
        for k, v in dict(data.get("network") or {}).items()
    }
    margin = data.get("margin") or {}
    value = _number(margin.get("value", DEFAULT_MARGIN), "margin.value")
    if value > 1:
        raise ValueError(f"margin.value is {value}, above 1 (it lowers a floor, never raises it)")
    return Floors(
        checked=data.get("checked"),
        margin=value,
        margin_reason=margin.get("reason"),
        allreduce=tuple(rows),
        network_gbps=network,
        sources=sources,
        file=name,
    )
