"""`nodes`: act on a deployed cluster's nodes (list, replace, reboot, delete) through HyperPod's
batch node operations, with guards, as data the command line renders.

The nodes and their health come from `status` (`cluster_state`: ListClusterNodes, the health
runner's verdicts, the EKS label), so "unhealthy" means here what it means there. A plan is
made before anything is called: the nodes selected, the ones a guard refuses (the controller
group's nodes; every node of a group at once), the edit the environment file needs after a
delete, and what happens to the Slurm jobs on them. `act` then calls the API, 25 nodes a call.

`MoveClusterNodes` is not in the pinned botocore (1.43.127): `move` comes with the bump.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.operations.status import ClusterState, NodeState, is_unhealthy
from hyperpod_kit.operator_policy import NODE_OPERATIONS

OPERATIONS = NODE_OPERATIONS  # the API's operation for each action (hyperpod_kit.operator_policy)
ACTIONS = ("list", *OPERATIONS)
PER_CALL = 25  # BatchReplace/BatchRebootClusterNodes take 1 to 25 node ids a call
# The API's NodeId pattern (botocore's model): i- and 8 or 17 hexadecimal digits.
INSTANCE_ID = re.compile(r"^i-[a-f0-9]{8}(?:[a-f0-9]{9})?$")

# What HyperPod documents of each operation (cited in docs/day2.md); on Slurm, the API does not
# drain the node first: its jobs end when the instance stops.
SOURCES = {
    "replace": "https://docs.aws.amazon.com/sagemaker/latest/APIReference/"
    "API_BatchReplaceClusterNodes.html",
    "reboot": "https://docs.aws.amazon.com/sagemaker/latest/APIReference/"
    "API_BatchRebootClusterNodes.html",
    "delete": "https://docs.aws.amazon.com/sagemaker/latest/APIReference/"
    "API_BatchDeleteClusterNodes.html",
}
SLURM_DELETE_GUIDE = (
    "https://awslabs.github.io/ai-on-sagemaker-hyperpod/docs/Tips/Slurm/delete-cluster-nodes"
)
WHAT_HAPPENS = {
    "replace": "HyperPod terminates the instance and provisions a new one with the same "
    "configuration; every instance volume (root and secondary) is lost",
    "reboot": "HyperPod reboots the instance (EC2 RebootInstances, a clean OS shutdown); its "
    "volumes are kept",
    "delete": "HyperPod terminates the instance and lowers the group's count; its volumes are lost",
}


class NodesError(Exception):
    """Bad input (an id that is no instance id or no node of the cluster, an unknown group,
    nothing selected): one line, exit 2."""


@dataclass(frozen=True)
class Refusal:
    node: NodeState
    why: str


@dataclass(frozen=True)
class Edit:
    """The environment file's edit after a delete: FILE:LINE path: N -> M."""

    at: str
    path: str
    before: int
    after: int

    def render(self) -> str:
        return f"{self.at} {self.path}: {self.before} -> {self.after}"


@dataclass
class Plan:
    action: str
    cluster: str
    nodes: list[NodeState]
    refused: list[Refusal] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # node id, code: message


def check_ids(ids: list[str]) -> None:
    """NodesError on the first word that is not an instance id (the API's pattern)."""
    bad = [i for i in ids if not INSTANCE_ID.match(i)]
    if bad:
        raise NodesError(f"{bad[0]!r} is not an instance id. Hint: i- and 17 (or 8) hexadecimal "
                         "digits, e.g. i-0123456789abcdef0; `hyperpod-kit nodes FILE list` "
                         "shows the cluster's nodes.")  # fmt: skip


def select(
    cluster: ClusterState, config: EnvironmentConfig, *, ids: list[str], group: str | None,
    unhealthy: bool,
) -> list[NodeState]:  # fmt: skip
    """The cluster's nodes named by id, of `group`, and (with `unhealthy`) those `status`
    judges unhealthy; all nodes when nothing narrows. NodesError on a bad id or group."""
    check_ids(ids)
    known = {n.instance_id: n for n in cluster.nodes}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise NodesError(f"{unknown[0]} is not a node of cluster {cluster.name}. Hint: "
                         "`hyperpod-kit nodes FILE list` shows its nodes.")  # fmt: skip
    if group is not None:
        groups = {g.name for g in config.cluster.instance_groups} | {g.name for g in cluster.groups}
        if group not in groups:
            raise NodesError(f"--group {group}: no such instance group in the file or cluster "
                             f"{cluster.name}. Hint: one of "
                             f"{', '.join(sorted(groups))}.")  # fmt: skip
    chosen = [known[i] for i in dict.fromkeys(ids)] if ids else list(cluster.nodes)
    if group is not None:
        chosen = [n for n in chosen if n.group == group]
    if unhealthy:
        chosen = [n for n in chosen if is_unhealthy(n)]
    return chosen


def plan(
    action: str, cluster: ClusterState, config: EnvironmentConfig, nodes: list[NodeState], *,
    force: bool, at: Any,
) -> Plan:  # fmt: skip
    """What `action` on `nodes` would do: the guards' refusals (lifted by `force`), the file's
    edit for a delete (`at(path)` gives a key's FILE:LINE), the notes on jobs and the file."""
    p = Plan(action, cluster.name, nodes)
    if action == "list":
        return p
    roles = {g.name: g.role for g in config.cluster.instance_groups}
    in_group = Counter(n.group for n in cluster.nodes)
    taken = Counter(n.group for n in nodes)
    if not force:
        for n in nodes:
            if roles.get(n.group) == "controller":
                p.refused.append(Refusal(n, f"it is the controller (group {n.group}): the "
                                         "cluster's scheduler runs on it"))  # fmt: skip
            elif taken[n.group] >= in_group[n.group]:
                left = "no node" if action == "delete" else "no node running meanwhile"
                why = (f"it is among the last nodes of group {n.group}: {action} of all "
                       f"{in_group[n.group]} would leave it {left}")  # fmt: skip
                p.refused.append(Refusal(n, why))
    if action == "delete":  # the group runs fewer nodes than the file says until a deploy
        p.edits = _edits(config, taken, at, {g.name: g.target for g in cluster.groups})
    if config.orchestrator == "slurm":
        p.notes.append(slurm_note(action))
    return p


def _edits(
    config: EnvironmentConfig, taken: Counter[str], at: Any, targets: dict[str, int]
) -> list[Edit]:
    """Each group's count after the delete: HyperPod's target for it (the file's count when
    AWS has none) less the nodes deleted; the file should say that to keep them deleted."""
    edits = []
    for i, g in enumerate(config.cluster.instance_groups):
        if taken[g.name]:
            after = max(0, targets.get(g.name, g.instance_count) - taken[g.name])
            if after == g.instance_count:
                continue  # a group scaled up by hand comes back to the file's count
            edits.append(Edit(at(f"cluster.instance_groups[{i}].instance_count"),
                              f"cluster.instance_groups[{g.name}].instance_count",
                              g.instance_count, after))  # fmt: skip
    return edits


def slurm_note(action: str) -> str:
    """How the Slurm jobs on the nodes are treated (HyperPod's documentation, cited)."""
    how = WHAT_HAPPENS[action]
    return (
        f"Slurm: {how}. The API does not drain the node first: a job running on it ends when "
        "the instance stops (jobs submitted with --requeue, or HyperPod's --auto-resume=1, "
        "start again on other nodes). To let running jobs finish, drain the node first "
        "(scontrol update node=NAME state=drain reason=...) and act when it is idle. "
        f"Source: {SOURCES[action]}" + (f", {SLURM_DELETE_GUIDE}" if action == "delete" else "")
    )


def act(aws: AwsFacade, p: Plan) -> Outcome:
    """Call the action's batch operation, 25 nodes a call; each node's result."""
    operation = OPERATIONS[p.action]
    sagemaker = aws.client("sagemaker")
    method = getattr(sagemaker, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower())
    out = Outcome()
    ids = [n.instance_id for n in p.nodes]
    for start in range(0, len(ids), PER_CALL):
        try:
            answer = aws.call(f"sagemaker:{operation}", method, ClusterName=p.cluster,
                              NodeIds=ids[start : start + PER_CALL])  # fmt: skip
        except AwsUnavailableError as e:
            if start == 0:
                raise  # nothing done yet: the command's one line
            out.failed += [(i, f"not asked: {e}") for i in ids[start:]]
            break
        out.done += [str(i) for i in answer.get("Successful", [])]
        for row in answer.get("Failed", []):
            code = row.get("ErrorCode") or row.get("Code") or ""
            out.failed.append((str(row.get("NodeId", "")), f"{code}: {row.get('Message', '')}"))
    return out
