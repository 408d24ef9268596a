"""What an environment brings and costs, before it is deployed (`hyperpod-kit estimate`).

Every figure says how it was computed and from which dated table: accelerators and EFA adapters
from the instance-type table, the file system's throughput as FSx counts it, the time to write and
read one checkpoint of the job's model (its size from the trainer's own `checkpoint_bytes`, read
without torch), and the hourly and monthly cost from the price table (`config/facts/prices.json`),
which holds only prices a public source quotes. A price that is not there is reported as missing,
never guessed; nodes under a training plan are prepaid and not in the hourly cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hyperpod_kit.config.derived import (
    creates_grafana_workspace,
    creates_prometheus_workspace,
    interface_endpoints,
    job_group,
    lustre_throughput_mb_s,
    lustre_tib,
    prometheus_enabled,
    slurm_accounting,
    trainer_settings,
    training_plan_of,
)
from hyperpod_kit.config.facts import instance_type, instance_types_checked
from hyperpod_kit.config.facts import prices as price_table
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig, InstanceGroupConfig
from hyperpod_trainer.memory import GIB

# Above this share of the checkpoint interval, writing checkpoints is a cost worth a warning.
CHECKPOINT_SHARE_WARNING = 0.05
INSTANCE_TABLE = "instance types"
TRAINER_TABLE = "trainer presets"


@dataclass(frozen=True)
class Figure:
    """One number of the estimate: its value (None: unknown), how it was found, from what."""

    key: str
    label: str
    value: float | None
    unit: str
    shown: str  # the value as printed ("1,200 GiB = 1.2 TiB", "unknown")
    how: str
    table: str | None = None  # the dated table it comes from, "instance types, checked ..."


@dataclass(frozen=True)
class CostLine:
    """One thing that costs money while the environment exists."""

    kind: str  # "instances", "lustre", "nat", "accounting", "endpoints", "prometheus", "grafana"
    item: str
    hourly_usd: float | None  # None: no price data, or prepaid
    monthly_usd: float | None
    how: str
    prepaid: bool = False
    missing: str | None = None  # "no price data for ml.g5.8xlarge in us-west-2"
    sources: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Estimate:
    environment: str
    region: str
    figures: list[Figure]
    costs: list[CostLine]
    warnings: list[Finding]
    tables: dict[str, str]  # table -> the day it was checked (the Pricing API: the day it was read)
    prices: str = (
        ""  # where the prices come from: "prices, checked ..." | "AWS Pricing API, read ..."
    )

    def figure(self, key: str) -> Figure:
        return next(f for f in self.figures if f.key == key)

    @property
    def hourly_usd(self) -> float:
        return sum(c.hourly_usd or 0.0 for c in self.costs)

    @property
    def unpriced(self) -> list[CostLine]:
        return [c for c in self.costs if c.missing is not None]

    def as_json(self) -> dict[str, Any]:
        hours = price_table.hours_per_month()
        return {
            "environment": self.environment,
            "region": self.region,
            "tables": self.tables,
            "figures": [asdict(f) for f in self.figures],
            "cost": {
                "currency": price_table.currency(),
                "prices": self.prices,
                "hours_per_month": hours,
                "lines": [asdict(c) for c in self.costs],
                "priced_hourly_usd": round(self.hourly_usd, 4),
                "priced_monthly_usd": round(self.hourly_usd * hours, 2),
                "complete": not self.unpriced,
                "missing": [c.missing for c in self.unpriced],
            },
            "warnings": [
                {"path": w.path, "line": w.line, "message": w.message, "hint": w.hint}
                for w in self.warnings
            ],
        }


# --- numbers as people read them ---------------------------------------------------------------


def _num(value: float, digits: int = 1) -> str:
    """1200 -> "1,200", 1.2 -> "1.2", 2.0 -> "2" (no trailing zeros); from 10^15 on,
    "1.23e+15" (never a line of digits)."""
    if abs(value) >= 1e15:
        return f"{value:.3g}"
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _bytes(value: float) -> str:
    return f"{_num(value / 1e9)} GB" if value >= 1e8 else f"{_num(value / 1e6, 2)} MB"


def _seconds(value: float) -> str:
    if value < 120:
        return f"{_num(value)} s"
    if value < 7200:
        return f"{_num(value / 60)} min"
    return f"{_num(value / 3600)} h" if value < 172_800 else f"{_num(value / 86_400)} days"


def _usd(value: float) -> str:
    return f"${value:,.4f}".rstrip("0").rstrip(".") if value < 1 else f"${value:,.2f}"


# --- the figures -------------------------------------------------------------------------------


def _group_hardware(config: EnvironmentConfig, key: str) -> Figure:
    """Accelerators or EFA adapters over every instance group, from the instance-type table."""
    label = {"accelerators": "accelerators", "efa_adapters": "EFA adapters"}[key]
    table = f"{INSTANCE_TABLE}, checked {instance_types_checked()}"
    total = 0
    parts: list[str] = []
    unknown: list[str] = []
    for group in config.cluster.instance_groups:
        facts = instance_type(group.primary_type)
        if facts is None:
            unknown.append(group.primary_type)
            continue
        if key == "accelerators":
            each: int | None = facts.accelerators
            what = f"{facts.accelerator or 'accelerator'}" if facts.accelerators else ""
        else:
            each, what = facts.efa_interfaces, "EFA"
        if each is None:
            unknown.append(group.primary_type)
            continue
        if each:
            parts.append(
                f"{group.name}: {group.instance_count} x {_types(group)} x {each} {what}".rstrip()
            )
        total += group.instance_count * each
    how = " + ".join(parts) if parts else "no group has any"
    if unknown:
        listing = ", ".join(sorted(set(unknown)))
        return Figure(
            key, label, None, "", "unknown", f"the table does not know {listing}; {how}", table
        )
    return Figure(key, label, total, "", _num(total, 0), how, table)


def _lustre(config: EnvironmentConfig) -> list[Figure]:
    lustre = config.storage.lustre
    if lustre.existing is not None:
        how = (
            f"an existing file system ({lustre.existing.file_system_id}): its size and tier "
            "are not in the environment file"
        )
        return [
            Figure("lustre_capacity", "Lustre capacity", None, "GiB", "unknown", how),
            Figure("lustre_throughput", "Lustre throughput", None, "MB/s", "unknown", how),
        ]
    tib = lustre_tib(lustre)
    mb_s = lustre_throughput_mb_s(lustre)
    gib = lustre.storage_capacity_gib
    return [
        Figure(
            "lustre_capacity",
            "Lustre capacity",
            float(gib),
            "GiB",
            f"{_num(gib, 0)} GiB = {_num(tib, 2)} TiB",
            "GiB / 1000 = TiB, as FSx counts capacity for throughput",
        ),
        Figure(
            "lustre_throughput",
            "Lustre throughput",
            mb_s,
            "MB/s",
            f"{_num(mb_s, 0)} MB/s",
            f"{_num(tib, 2)} TiB x {lustre.throughput_per_unit_storage} MB/s/TiB "
            "(PERSISTENT_2 aggregate; MB = 10^6 bytes)",
        ),
    ]


def _checkpoint_size(config: EnvironmentConfig) -> Figure:
    """The trainer's own count: its config (preset and overrides) through `checkpoint_bytes`."""
    from hyperpod_kit.config.validators.trainer import trainer_config_module

    trainer = trainer_config_module()
    job = config.trainer.job
    cfg = trainer.load_config(None, [f"{s.key}={s.value}" for s in trainer_settings(job)])
    shape = cfg.shape()
    size = float(cfg.checkpoint_bytes())
    how = (
        f"{job.preset}: {shape.num_params():,} parameters x 12 bytes (fp32 sharded parameters "
        f"and two Adam moments) + {shape.num_param_tensors()} Adam step counters x 4 bytes; "
        "the small state (step, data position, scheduler, RNG) is not counted"
    )
    return Figure(
        "checkpoint_size",
        "checkpoint size",
        size,
        "bytes",
        _bytes(size),
        how,
        f"{TRAINER_TABLE} (assets/trainer/hyperpod_trainer/presets.py)",
    )


def _memory_per_gpu(config: EnvironmentConfig) -> Figure:
    """The job's memory per GPU (hyperpod_trainer.memory) against its GPU's, as `validate`
    checks it (at its smallest elastic size): "fits" or "does not fit"."""
    from hyperpod_kit.config.validators.trainer import job_memory

    key, label = "memory_per_gpu", "memory per GPU"
    found = job_memory(config)
    if found is None:
        how = (
            "the job's group has no GPU of known memory in the instance-type table, or the "
            "trainer refuses the job's settings"
        )
        return Figure(key, label, None, "GiB", "unknown", how)
    job = config.trainer.job
    verdict = "fits" if found.fits else "does not fit"
    checkpointing = "on" if job.activation_checkpointing else "off"
    how = (
        f"{verdict} in {found.gpu_gib:g} GiB of {found.instance_type}: {found.memory.parts()} "
        f"(FSDP2 over {found.ranks} GPU{'s' if found.ranks > 1 else ''} on {found.nodes} "
        f"node{'s' if found.nodes > 1 else ''}"
        + (", its smallest elastic size" if found.nodes != job.nodes else "")
        + f", micro batch "
        f"{job.micro_batch_size} x {job.seq_len} tokens, activation checkpointing "
        f"{checkpointing}; docs/trainer.md, Presets and memory per GPU)"
    )
    total = found.memory.total / GIB
    return Figure(
        key,
        label,
        total,
        "GiB",
        f"{total:.1f} GiB, {verdict}",
        how,
        f"{TRAINER_TABLE} and {INSTANCE_TABLE}, checked {instance_types_checked()}",
    )


def _checkpoint_rate(config: EnvironmentConfig, lustre_mb_s: float | None) -> Figure:
    """The lesser of the file system's throughput and the job nodes' network bandwidth."""
    group = job_group(config)
    nodes = config.trainer.job.nodes
    where = group.primary_type if group is not None else "the job's group"
    # The instance table (from the team's fact sheet) has no network bandwidth column.
    network = (
        f"the network bandwidth of {nodes} x {where} is unknown (the instance-type "
        "table has no bandwidth column)"
    )
    if lustre_mb_s is None:
        return Figure(
            "checkpoint_rate",
            "checkpoint rate",
            None,
            "MB/s",
            "unknown",
            f"the file system's throughput is unknown, and {network}",
        )
    return Figure(
        "checkpoint_rate",
        "checkpoint rate",
        lustre_mb_s,
        "MB/s",
        f"{_num(lustre_mb_s, 0)} MB/s",
        f"the lesser of the file system's {_num(lustre_mb_s, 0)} MB/s and the nodes' "
        f"network; {network}, so the file system's throughput bounds it",
        f"{INSTANCE_TABLE}, checked {instance_types_checked()}",
    )


def _checkpoint_times(size: Figure, rate: Figure) -> list[Figure]:
    out = []
    for key, label, verb in (
        ("checkpoint_write_s", "write one checkpoint", "written"),
        ("checkpoint_read_s", "read one checkpoint", "read on resume"),
    ):
        if size.value is None or rate.value is None:
            out.append(Figure(key, label, None, "s", "unknown", "the rate is unknown"))
            continue
        seconds = size.value / (rate.value * 1e6)
        out.append(
            Figure(
                key, label, seconds, "s", _seconds(seconds), f"{size.shown} {verb} at {rate.shown}"
            )
        )
    return out


def _checkpoint_share(
    config: EnvironmentConfig, write: Figure, step_time_s: float | None
) -> tuple[Figure, list[Finding]]:
    every = config.trainer.job.checkpoint_every
    key, label = "checkpoint_share", "share of the checkpoint interval"
    if step_time_s is None:
        return Figure(
            key,
            label,
            None,
            "",
            "not computed",
            f"give --step-time SECONDS: a checkpoint every {every} steps",
        ), []
    interval = every * step_time_s
    if write.value is None:
        return Figure(key, label, None, "", "unknown", "the write time is unknown"), []
    share = write.value / interval
    figure = Figure(
        key,
        label,
        share,
        "",
        f"{_num(share * 100, 1)}%",
        f"{write.shown} every {every} steps x {_num(step_time_s, 3)} s = {_seconds(interval)}",
    )
    warnings = []
    if share > CHECKPOINT_SHARE_WARNING:
        fewer = int(-(-write.value // (CHECKPOINT_SHARE_WARNING * step_time_s)))
        warnings.append(
            Finding(
                Level.WARNING,
                "trainer.job.checkpoint_every",
                f"writing one checkpoint ({write.shown}) takes {_num(share * 100, 1)}% of the "
                f"interval between checkpoints ({_seconds(interval)}), above "
                f"{CHECKPOINT_SHARE_WARNING:.0%}",
                f"checkpoint every {fewer} steps or more, or raise "
                "storage.lustre.throughput_per_unit_storage or the capacity",
            )
        )
    return figure, warnings


# --- the cost ----------------------------------------------------------------------------------


def _sources(price: price_table.Price) -> list[dict[str, str]]:
    return [{"url": s.url, "quote": s.what, "read": s.read} for s in price.sources]


def _monthly(hourly: float) -> float:
    return hourly * price_table.hours_per_month()


def _types(group: InstanceGroupConfig) -> str:
    """A group's type, or a flexible group's first type and how many others it may get."""
    others = len(group.types) - 1
    return group.primary_type + (
        f" (first of {others + 1} types; priced as the first)" if others else ""
    )


def _missing(what: str, book: price_table.PriceBook) -> str:
    """ "no price data for X", and with the Pricing API why it had none."""
    why = book.why()
    return f"no price data for {what}" + (f" ({book.label}: {why})" if why else "")


def _group_cost(
    config: EnvironmentConfig, group: InstanceGroupConfig, book: price_table.PriceBook
) -> CostLine:
    item = f"{group.name}: {group.instance_count} x {_types(group)}"
    plan = training_plan_of(config, group)
    if plan is not None:  # the plan covers these nodes (derived.training_plan_of)
        return CostLine(
            "instances",
            item,
            None,
            None,
            f"prepaid through the training plan {plan}; not in the hourly cost",
            prepaid=True,
        )
    if group.capacity == "spot":
        missing = f"no price data for spot capacity of {group.primary_type}: spot prices move"
        return CostLine("instances", item, None, None, missing, missing=missing)
    price = book.instance_hour(group.primary_type, config.region)
    if price is None:
        missing = _missing(f"{group.primary_type} in {config.region}", book)
        return CostLine("instances", item, None, None, missing, missing=missing)
    hourly = group.instance_count * price.usd
    return CostLine(
        "instances",
        item,
        hourly,
        _monthly(hourly),
        f"{group.instance_count} x {_usd(price.usd)}/hour",
        sources=_sources(price),
    )


def _lustre_cost(config: EnvironmentConfig, book: price_table.PriceBook) -> CostLine:
    lustre = config.storage.lustre
    if lustre.existing is not None:
        return CostLine(
            "lustre",
            f"FSx for Lustre: {lustre.existing.file_system_id}",
            None,
            None,
            "an existing file system: billed where it was created, not here",
        )
    gb, tier = lustre.storage_capacity_gib, lustre.throughput_per_unit_storage
    item = f"FSx for Lustre: {_num(gb, 0)} GB PERSISTENT_2 at {tier} MB/s/TiB"
    price = book.lustre_gb_month(tier, config.region)
    if price is None:
        what = f"FSx for Lustre PERSISTENT_2 at {tier} MB/s/TiB in {config.region}"
        missing = _missing(what, book)
        return CostLine("lustre", item, None, None, missing, missing=missing)
    monthly = gb * price.usd
    return CostLine(
        "lustre",
        item,
        monthly / price_table.hours_per_month(),
        monthly,
        f"{_num(gb, 0)} GB x {_usd(price.usd)}/GB-month",
        sources=_sources(price),
    )


def _nat_cost(config: EnvironmentConfig, book: price_table.PriceBook) -> CostLine | None:
    if config.network.existing_vpc is not None:
        return None  # the VPC's own NAT, not ours
    price = book.nat_gateway_hour(config.region)
    if price is None:
        missing = _missing(f"a NAT gateway in {config.region}", book)
        return CostLine("nat", "NAT gateway: 1", None, None, missing, missing=missing)
    per_gb = book.nat_gateway_gb(config.region)
    usage = f"; data processed costs {_usd(per_gb.usd)}/GB more" if per_gb is not None else ""
    return CostLine(
        "nat",
        "NAT gateway: 1",
        price.usd,
        _monthly(price.usd),
        f"1 x {_usd(price.usd)}/hour (the network stack's one NAT gateway){usage}",
        sources=_sources(price),
    )


def _accounting_cost(config: EnvironmentConfig) -> CostLine | None:
    """The Slurm accounting database: no price table here quotes Aurora, so it is named, with
    what it bills for, and left unpriced (never guessed)."""
    if not slurm_accounting(config):
        return None
    acc = config.cluster.slurm.accounting
    capacity = f"{acc.min_capacity:g}-{acc.max_capacity:g} ACUs"
    item = f"Slurm accounting database: Aurora Serverless v2, {capacity}"
    missing = f"no price data for Aurora Serverless v2 in {config.region}"
    how = (
        f"{missing}: the price table quotes no Aurora price; it bills at least "
        f"{acc.min_capacity:g} ACU every hour (slurmdbd keeps a connection open, so it never "
        "pauses), plus storage, I/O and backups beyond the free retention"
    )
    return CostLine("accounting", item, None, None, how, missing=missing)


def _endpoints_cost(config: EnvironmentConfig) -> CostLine | None:
    """The network stack's interface endpoints: no price table here quotes them, so they are
    named, with what they bill for, and left unpriced."""
    services = interface_endpoints(config)
    if not services:
        return None
    item = f"interface endpoints: {len(services)} ({', '.join(services)})"
    missing = f"no price data for interface VPC endpoints in {config.region}"
    how = f"{missing}: each endpoint bills every hour in its one zone, plus each GB it processes"
    return CostLine("endpoints", item, None, None, how, missing=missing)


def _prometheus_cost(config: EnvironmentConfig) -> CostLine | None:
    """The Prometheus workspace (created or existing): billed by use, not by the hour, and no
    price table here quotes it."""
    if not prometheus_enabled(config):
        return None
    prometheus = config.monitoring.prometheus
    if creates_prometheus_workspace(config):
        item = "Amazon Managed Service for Prometheus: a new workspace"
    else:
        item = f"Amazon Managed Service for Prometheus: {prometheus.workspace_arn}"
    missing = f"no price data for Amazon Managed Service for Prometheus in {config.region}"
    how = (
        f"{missing}: it bills the metric samples ingested, the GB stored and the samples queried "
        "(ingestion grows with nodes x exporters x one scrape every "
        f"{prometheus.scrape_interval_seconds} s)"
        + ("" if creates_prometheus_workspace(config) else ", to the workspace's account")
    )
    return CostLine("prometheus", item, None, None, how, missing=missing)


def _grafana_cost(config: EnvironmentConfig) -> CostLine | None:
    if not creates_grafana_workspace(config):
        return None
    missing = f"no price data for Amazon Managed Grafana in {config.region}"
    how = f"{missing}: it bills each active editor or admin and each active viewer per month"
    return CostLine(
        "grafana", "Amazon Managed Grafana: 1 workspace", None, None, how, missing=missing
    )


# --- all of it ---------------------------------------------------------------------------------


def estimate(
    config: EnvironmentConfig,
    *,
    step_time_s: float | None = None,
    prices: price_table.PriceBook | None = None,
) -> Estimate:
    """The figures and the cost of `config` (a validated environment), priced from `prices`
    (the bundled table unless given: `estimate --aws` gives the Pricing API)."""
    book = prices if prices is not None else price_table.BundledPrices()
    lustre = _lustre(config)
    size = _checkpoint_size(config)
    rate = _checkpoint_rate(config, lustre[1].value)
    write, read = _checkpoint_times(size, rate)
    share, warnings = _checkpoint_share(config, write, step_time_s)
    figures = [
        _group_hardware(config, "accelerators"),
        _group_hardware(config, "efa_adapters"),
        _memory_per_gpu(config),
        *lustre,
        size,
        rate,
        write,
        read,
        share,
    ]
    costs = [_group_cost(config, g, book) for g in config.cluster.instance_groups]
    costs.append(_lustre_cost(config, book))
    if (nat := _nat_cost(config, book)) is not None:
        costs.append(nat)
    for line in (
        _accounting_cost(config),
        _endpoints_cost(config),
        _prometheus_cost(config),
        _grafana_cost(config),
    ):
        if line is not None:
            costs.append(line)
    tables = {INSTANCE_TABLE: instance_types_checked(), book.name: book.date}
    return Estimate(config.name, config.region, figures, costs, warnings, tables, book.label)


def render_text(result: Estimate) -> str:
    """The estimate for people: each figure with how it was computed, then the cost."""
    width = max(len(f.label) for f in result.figures)
    shown = max(len(f.shown) for f in result.figures)
    lines = [f"{result.environment} ({result.region}): estimate", ""]
    for f in result.figures:
        source = f" [{f.table}]" if f.table else ""
        lines.append(f"  {f.label:<{width}}  {f.shown:<{shown}}  {f.how}{source}")
    hours = price_table.hours_per_month()
    lines += [
        "",
        f"cost, {price_table.currency()} [{result.prices}; a month is {hours} hours]:",
    ]
    for c in result.costs:
        if c.hourly_usd is None or c.monthly_usd is None:
            money = "prepaid" if c.prepaid else "unknown" if c.missing else "not counted"
        else:
            money = f"{_usd(c.hourly_usd)}/hour, {_usd(c.monthly_usd)}/month"
        lines.append(f"  {c.item}: {money} ({c.how})")
        for s in c.sources:  # a page with its address, or the Pricing API with the SKU
            lines.append(
                f"      source: {s['url']} (read {s['read']})"
                if s["url"].startswith("https://")
                else f"      source: {s['url']}, read {s['read']} ({s['quote']})"
            )
    total = result.hourly_usd
    summary = f"  total of what has a price: {_usd(total)}/hour, {_usd(total * hours)}/month"
    if result.unpriced:
        summary += f"; {len(result.unpriced)} item(s) without price data, not counted"
    lines.append(summary)
    return "\n".join(lines) + "\n"
