"""`hyperpod-kit estimate`: every figure against values computed by hand, the price table's rules
(cited or missing, never guessed), and the checkpoint size the trainer itself reports.

Hand computations (FSx counts 1,200 GiB as 1.2 TiB; MB = 10^6 bytes):

    default.yaml      2 x ml.g5.8xlarge (1 A10G, 1 EFA each); 1,200 GiB at 250 MB/s/TiB
                      = 1.2 x 250 = 300 MB/s; llama-1b (tied embeddings):
                        embedding 128,256 x 2,048                         =   262,668,288
                        per layer 2*2048^2 + 2*2048*512 + 3*2048*8192 + 2*2048 = 60,821,504
                        16 layers                                         =   973,144,064
                        final norm                                        =         2,048
                        parameters                                        = 1,235,814,400
                        tensors 1 + 16 x 9 + 1                            =           146
                      checkpoint 12 x 1,235,814,400 + 4 x 146 = 14,829,773,384 bytes
                      write (and read) 14,829,773,384 / 300e6 = 49.43 s

    prod-slurm.yaml   16 x ml.p5.48xlarge (8 H100, 32 EFA each) = 128 GPUs, 512 EFA;
                      4,800 GiB at 500 MB/s/TiB = 4.8 x 500 = 2,400 MB/s; llama-8b:
                        embedding and output 2 x 128,256 x 4,096          = 1,050,673,152
                        per layer 2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096 = 218,112,000
                        32 layers                                         = 6,979,584,000
                        final norm                                        =         4,096
                        parameters                                        = 8,030,261,248
                        tensors 1 + 32 x 9 + 1 + 1                        =           291
                      checkpoint 12 x 8,030,261,248 + 4 x 291 = 96,363,136,140 bytes (~96 GB)
                      write 96,363,136,140 / 2,400e6 = 40.15 s; every 500 steps:
                      at 2 s a step 40.15 / 1,000 = 4.0 % (no warning),
                      at 0.5 s a step 40.15 / 250 = 16.1 % (a warning: above 5 %)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hyperpod_kit.cli import main as cli
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.facts import instance_types_checked
from hyperpod_kit.config.facts import prices as price_table
from hyperpod_kit.estimate import Estimate, estimate, render_text
from tests.conftest import REPO, WriteEnv

DEFAULT = REPO / "environments" / "default.yaml"
PROD = REPO / "environments" / "prod-slurm.yaml"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def of(path: Path, step_time_s: float | None = None) -> Estimate:
    return estimate(load_environment(path).config, step_time_s=step_time_s)


# --- figures against hand-computed values -------------------------------------------------------


def test_default_environment_figures() -> None:
    result = of(DEFAULT)
    assert result.figure("accelerators").value == 2
    assert result.figure("efa_adapters").value == 2
    assert result.figure("lustre_capacity").shown == "1,200 GiB = 1.2 TiB"
    assert result.figure("lustre_throughput").value == pytest.approx(300)
    assert result.figure("lustre_throughput").shown == "300 MB/s"
    assert result.figure("checkpoint_size").value == 14_829_773_384
    assert "1,235,814,400 parameters x 12 bytes" in result.figure("checkpoint_size").how
    assert result.figure("checkpoint_rate").value == pytest.approx(300)
    assert result.figure("checkpoint_write_s").value == pytest.approx(49.4326, abs=1e-3)
    assert result.figure("checkpoint_read_s").value == pytest.approx(49.4326, abs=1e-3)
    assert result.figure("checkpoint_share").value is None  # no --step-time
    assert "--step-time" in result.figure("checkpoint_share").how


def test_prod_environment_figures() -> None:
    result = of(PROD, step_time_s=2.0)
    assert result.figure("accelerators").value == 128
    assert result.figure("accelerators").how == "gpu: 16 x ml.p5.48xlarge x 8 NVIDIA H100"
    assert result.figure("efa_adapters").value == 512
    assert result.figure("lustre_capacity").shown == "4,800 GiB = 4.8 TiB"
    assert result.figure("lustre_throughput").value == pytest.approx(2400)
    assert result.figure("lustre_throughput").how.startswith("4.8 TiB x 500 MB/s/TiB")
    assert result.figure("checkpoint_size").value == 96_363_136_140
    assert result.figure("checkpoint_size").shown == "96.4 GB"
    assert result.figure("checkpoint_write_s").value == pytest.approx(40.1513, abs=1e-3)
    assert result.figure("checkpoint_share").value == pytest.approx(0.040151, abs=1e-5)
    assert result.warnings == []


def test_checkpoint_share_above_five_percent_warns() -> None:
    result = of(PROD, step_time_s=0.5)
    assert result.figure("checkpoint_share").value == pytest.approx(0.160605, abs=1e-5)
    (warning,) = result.warnings
    assert warning.path == "trainer.job.checkpoint_every"
    assert "16.1% of the interval" in warning.message and "above 5%" in warning.message
    # 40.15 s is 5% of 803 s = 1,606.1 steps of 0.5 s
    assert warning.hint is not None and "every 1607 steps" in warning.hint


def test_figures_name_the_date_of_their_table() -> None:
    result = of(DEFAULT)
    checked = instance_types_checked()
    for key in ("accelerators", "efa_adapters", "checkpoint_rate"):
        assert result.figure(key).table == f"instance types, checked {checked}"
    assert "presets" in str(result.figure("checkpoint_size").table)
    assert result.tables == {"instance types": checked, "prices": price_table.prices_checked()}


def test_network_bandwidth_is_reported_unknown() -> None:
    """The instance table has no bandwidth column: said so, and the file system bounds the rate."""
    how = of(DEFAULT).figure("checkpoint_rate").how
    assert "network bandwidth of 2 x ml.g5.8xlarge is unknown" in how


def test_existing_file_system_has_unknown_throughput(write_env: WriteEnv) -> None:
    existing = {
        "file_system_id": "fs-0123456789abcdef0",
        "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
        "mount_name": "abcdefgh",
    }
    path = write_env({"storage": {"lustre": {"existing": existing}}})
    result = of(path, step_time_s=1.0)
    for key in ("lustre_throughput", "checkpoint_rate", "checkpoint_write_s", "checkpoint_share"):
        assert result.figure(key).value is None, key
        assert result.figure(key).shown == "unknown"
    (lustre,) = [c for c in result.costs if c.kind == "lustre"]
    assert lustre.hourly_usd is None and lustre.missing is None  # not ours to price


@pytest.mark.parametrize("path", sorted(REPO.glob("environments/*.yaml")), ids=lambda p: p.name)
def test_every_example_estimates(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["estimate", str(path), "--format", "json", "--step-time", "1"])
    out, _ = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    assert [f["key"] for f in data["figures"]] == [
        "accelerators", "efa_adapters", "memory_per_gpu", "lustre_capacity", "lustre_throughput",
        "checkpoint_size", "checkpoint_rate", "checkpoint_write_s", "checkpoint_read_s",
        "checkpoint_share",
    ]  # fmt: skip
    for line in data["cost"]["lines"]:  # a cost is a price, prepaid, missing or not ours
        assert line["hourly_usd"] is not None or line["prepaid"] or line["how"]


# --- the cost -----------------------------------------------------------------------------------


def test_a_missing_price_is_named_never_guessed() -> None:
    result = of(DEFAULT)  # us-west-2: the table has no price for any of it
    missing = [c.missing for c in result.costs]
    assert missing == [
        "no price data for ml.m5.xlarge in us-west-2",
        "no price data for ml.m5.xlarge in us-west-2",
        "no price data for ml.g5.8xlarge in us-west-2",
        "no price data for FSx for Lustre PERSISTENT_2 at 250 MB/s/TiB in us-west-2",
        "no price data for a NAT gateway in us-west-2",
    ]
    assert all(c.hourly_usd is None for c in result.costs)
    assert result.hourly_usd == 0


def test_a_cited_price_is_used_with_its_sources() -> None:
    result = of(PROD)  # us-east-1: the NAT gateway's hour is cited
    (nat,) = [c for c in result.costs if c.kind == "nat"]
    assert nat.hourly_usd == pytest.approx(0.045)
    assert nat.monthly_usd == pytest.approx(0.045 * 730)
    assert nat.sources and all(s["url"].startswith("https://") for s in nat.sources)
    assert result.hourly_usd == pytest.approx(0.045)
    # three groups, the file system and the interface endpoints
    assert [c.kind for c in result.unpriced] == ["instances"] * 3 + ["lustre", "endpoints"]


def test_training_plan_nodes_are_prepaid(write_env: WriteEnv) -> None:
    arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/my-plan"
    result = of(write_env({"cluster": {"training_plan_arn": arn}}))
    by_item = {c.item: c for c in result.costs}
    compute = by_item["compute: 2 x ml.g5.8xlarge"]
    assert compute.prepaid and compute.hourly_usd is None and compute.missing is None
    assert arn in compute.how
    assert not by_item["controller: 1 x ml.m5.xlarge"].prepaid  # CPU groups are not on the plan


def test_price_table_rows_name_existing_sources() -> None:
    data = json.loads((Path(price_table.__file__).parent / "prices.json").read_text())
    assert DATE.match(data["checked"])
    for source in data["sources"].values():
        assert source["url"].startswith("https://") and source["what"]
        assert DATE.match(source["read"])

    def rows(node: object) -> list[dict[str, object]]:
        if isinstance(node, dict) and "usd" in node:
            return [node]
        return [r for v in (node.values() if isinstance(node, dict) else []) for r in rows(v)]

    kinds = (
        "instance_hour",
        "lustre_persistent_2_gb_month",
        "nat_gateway_hour",
        "nat_gateway_gb_processed",
    )
    for kind in kinds:
        for row in rows(data[kind]):
            assert isinstance(row["usd"], float) and row["usd"] > 0
            assert row["sources"] and all(s in data["sources"] for s in row["sources"])  # type: ignore[attr-defined]


# --- output -------------------------------------------------------------------------------------


def test_text_shows_each_figure_how_and_the_tables_dates() -> None:
    text = render_text(of(PROD, step_time_s=2.0))
    assert f"prices, checked {price_table.prices_checked()}" in text
    assert f"instance types, checked {instance_types_checked()}" in text
    assert re.search(r"Lustre throughput +2,400 MB/s +4\.8 TiB x 500 MB/s/TiB", text)
    assert re.search(r"write one checkpoint +40\.2 s +96\.4 GB written at 2,400 MB/s", text)
    assert "no price data for ml.p5.48xlarge in us-east-1" in text
    assert "total of what has a price: $0.045/hour, $32.85/month; 5 item(s) without" in text


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["estimate", str(PROD), "--format", "json", "--step-time", "0.5"])
    out, err = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    assert data["tables"]["prices"] == price_table.prices_checked()
    figures = {f["key"]: f for f in data["figures"]}
    assert figures["checkpoint_size"]["value"] == 96_363_136_140
    assert data["cost"]["complete"] is False
    assert "no price data for ml.p5.48xlarge in us-east-1" in data["cost"]["missing"]
    (warning,) = data["warnings"]
    line = next(i for i, text in enumerate(PROD.read_text().splitlines(), 1)
                if text.strip().startswith("checkpoint_every:"))  # fmt: skip
    assert warning["path"] == "trainer.job.checkpoint_every" and warning["line"] == line
    assert err.startswith(f"{PROD}:{line} warning: trainer.job.checkpoint_every:")


@pytest.mark.parametrize(
    "value", ["0", "-1", "abc", "nan", "inf", "-inf", "1e300", "1e-300", "86401", "0.0009"]
)
def test_bad_step_time_is_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["estimate", str(DEFAULT), f"--step-time={value}"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"--step-time: {value!r}")
    assert "Hint:" in err


@pytest.mark.parametrize("value", ["0.001", "86400"])
def test_step_time_at_its_bounds_is_taken_and_printed_short(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bounds themselves are accepted; no number on the share line runs to a line of
    digits (one day x 100 steps is shown in days)."""
    code = cli.main(["estimate", str(DEFAULT), f"--step-time={value}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (line,) = [t for t in out.splitlines() if "share of the checkpoint interval" in t]
    assert max(len(w) for w in line.split()) < 20, line
    if value == "86400":
        assert "= 100 days" in line


def test_huge_numbers_are_shown_in_scientific_notation() -> None:
    from hyperpod_kit.estimate import _num, _seconds

    assert _num(1e300) == "1e+300" and _num(123_456_789_012_345_678) == "1.23e+17"
    assert _num(1200) == "1,200" and _seconds(3 * 86_400) == "3 days"


def test_estimate_reads_the_trainer_without_torch() -> None:
    """The checkpoint size comes from the trainer package, without importing torch."""
    code = (
        "import sys; from hyperpod_kit.cli.main import main; "
        f"rc = main(['estimate', {str(DEFAULT)!r}]); "
        "assert rc == 0; assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_checkpoint_bytes_is_the_trainers_one_function() -> None:
    from hyperpod_trainer.presets import PRESETS, checkpoint_bytes

    tiny = PRESETS["tiny"]  # 119,104 parameters in 21 tensors
    assert tiny.num_params() == 119_104 and tiny.num_param_tensors() == 21
    assert checkpoint_bytes(tiny) == 12 * 119_104 + 4 * 21


def test_the_accounting_database_is_named_without_a_price() -> None:
    """No cited price quotes Aurora Serverless v2: the line says what it bills for and is left
    out of the total, never guessed."""
    result = of(REPO / "environments" / "slurm-platform.yaml")
    (database,) = [c for c in result.costs if c.kind == "accounting"]
    assert database.item == "Slurm accounting database: Aurora Serverless v2, 0.5-2 ACUs"
    assert database.missing == "no price data for Aurora Serverless v2 in us-west-2"
    assert database.hourly_usd is None and "at least 0.5 ACU every hour" in database.how
    assert not [c for c in of(DEFAULT).costs if c.kind == "accounting"]


def test_endpoints_prometheus_and_grafana_are_named_without_a_price() -> None:
    """What the platform examples create besides nodes, file system and NAT is listed with why
    it has no price: interface endpoints (one per service the network stack creates), the
    Prometheus workspace (new, or existing and billed to its account) and Grafana."""
    eks = of(REPO / "environments" / "eks-platform.yaml")
    (endpoints,) = [c for c in eks.costs if c.kind == "endpoints"]
    assert endpoints.item.startswith("interface endpoints: 13 (sagemaker.api, sts,")
    assert "eks-auth" in endpoints.item and "aps-workspaces" in endpoints.item
    assert endpoints.missing == "no price data for interface VPC endpoints in us-east-1"
    assert "every hour" in endpoints.how
    (amp,) = [c for c in eks.costs if c.kind == "prometheus"]
    assert amp.item.endswith("workspace/ws-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    assert amp.missing is not None and "workspace's account" in amp.how
    assert not [c for c in eks.costs if c.kind == "grafana"]

    slurm = of(REPO / "environments" / "slurm-platform.yaml")
    assert not [c for c in slurm.costs if c.kind == "endpoints"]  # NAT, no endpoints
    (amp,) = [c for c in slurm.costs if c.kind == "prometheus"]
    assert amp.item == "Amazon Managed Service for Prometheus: a new workspace"
    assert "scrape every 30 s" in amp.how
    (grafana,) = [c for c in slurm.costs if c.kind == "grafana"]
    assert grafana.missing == "no price data for Amazon Managed Grafana in us-west-2"
    assert {c.missing for c in slurm.unpriced} >= {amp.missing, grafana.missing}
    text = render_text(slurm)
    assert "  Amazon Managed Grafana: 1 workspace: unknown (no price data" in text

    default = of(DEFAULT)
    assert not [c for c in default.costs if c.kind in ("endpoints", "prometheus", "grafana")]


def test_interface_endpoints_are_the_network_stacks_list(write_env: WriteEnv) -> None:
    """The estimate counts the endpoints the network construct creates (one list), e.g. with
    accounting the Secrets Manager endpoint is one more."""
    from hyperpod_kit.config.derived import interface_endpoints

    config = load_environment(REPO / "environments" / "existing-resources.yaml").config
    (endpoints,) = [c for c in estimate(config).costs if c.kind == "endpoints"]
    assert endpoints.item == (
        f"interface endpoints: {len(interface_endpoints(config))} "
        f"({', '.join(interface_endpoints(config))})"
    )
    path = write_env({"network": {"interface_endpoints": False}})
    assert not [c for c in of(path).costs if c.kind == "endpoints"]
