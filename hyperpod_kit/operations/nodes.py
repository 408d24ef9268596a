"""`nodes`: act on a deployed cluster's nodes (list, replace, reboot, delete, move) through
HyperPod's node operations, with guards, as data the command line renders.

The nodes and their health come from `status` (`cluster_state`: ListClusterNodes, the health
runner's verdicts, the EKS label), so "unhealthy" means here what it means there. A plan is
made before anything is called: the nodes selected, the ones a guard refuses (the controller
group's nodes; every node of a group at once), the edit the environment file needs after a
delete or a move, and what happens to the Slurm jobs on them. `act` then calls the API, 25
nodes a call (a move: 50, one call per source group, `MoveClusterNodes` in botocore 1.44.8).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.operations.status import ClusterState, NodeState, is_unhealthy
from hyperpod_kit.operator_policy import MOVE_NEEDS, NODE_OPERATIONS, moves_nodes

OPERATIONS = NODE_OPERATIONS  # the API's operation for each action (hyperpod_kit.operator_policy)
ACTIONS = ("list", *OPERATIONS)
PER_CALL = 25  # BatchReplace/BatchRebootClusterNodes take 1 to 25 node ids a call
MOVE_PER_CALL = 50  # MoveClusterNodes: NodeIds 1 to 50, one source and one target group a call
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
    "move": "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_MoveClusterNodes.html",
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
    "move": "HyperPod detaches the instance from its group and attaches it to the target group "
    "(DetachInProgress, then AttachInProgress): it keeps its instance id and capacity, takes the "
    "target's configuration and lifecycle scripts, and its root and secondary EBS volumes are "
    "replaced (their data is lost)",
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
    target: str | None = None  # move: the group the nodes go to
    cluster_arn: str = ""  # move: the API names clusters by ARN


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


def move_refused(config: EnvironmentConfig, target: str | None) -> str | None:
    """Why the file's cluster cannot move nodes (before AWS is asked), or None."""
    if not target:
        return ("no target group. Hint: --to NAME, the instance group the nodes go to, e.g. "
                "hyperpod-kit nodes FILE move i-0123456789abcdef0 --to burst.")  # fmt: skip
    if not moves_nodes(config):
        return (f"MoveClusterNodes needs {MOVE_NEEDS}; this file's cluster is "
                f"{config.orchestrator} with node_provisioning "
                f"{config.cluster.node_provisioning}. Hint: replace or delete the nodes "
                "instead, or set cluster.node_provisioning: continuous on an EKS "
                "cluster.")  # fmt: skip
    return None


def _check_move(
    cluster: ClusterState, config: EnvironmentConfig, nodes: list[NodeState], target: str
) -> None:
    """NodesError when the target group is not the cluster's, a node is in it already, a
    node's instance type is not one the target group runs (NodeInstanceTypeMismatch), or the
    move would take a group below the file's min_instance_count (the API refuses it whole)."""
    groups = {g.name: g for g in cluster.groups}
    if target not in groups:
        raise NodesError(f"--to {target}: no such instance group in cluster {cluster.name}. "
                         f"Hint: one of {', '.join(sorted(groups)) or 'none'} (a group of the "
                         "file is created by a deploy).")  # fmt: skip
    types = [t for t in groups[target].instance_type.split("|") if t]
    for n in nodes:
        if n.group == target:
            raise NodesError(f"{n.instance_id} is in group {target} already. Hint: --to names "
                             "another group of the cluster.")  # fmt: skip
        if types and n.instance_type and n.instance_type not in types:
            raise NodesError(f"{n.instance_id} is a {n.instance_type}; group {target} runs "
                             f"{' or '.join(types)} (HyperPod refuses: NodeInstanceTypeMismatch)."
                             " Hint: move it to a group of its type.")  # fmt: skip
    left = Counter(n.group for n in cluster.nodes)
    left.subtract(n.group for n in nodes)
    for g in config.cluster.instance_groups:
        if g.name in left and g.min_instance_count and left[g.name] < g.min_instance_count:
            raise NodesError(f"the move would leave group {g.name} {left[g.name]} node(s), below "
                             f"its min_instance_count {g.min_instance_count}: HyperPod refuses "
                             "the whole request. Hint: move fewer nodes, or lower "
                             "min_instance_count and deploy first.")  # fmt: skip
    if not cluster.arn:
        raise NodesError(f"cluster {cluster.name}: DescribeCluster gave no ClusterArn, which "
                         "MoveClusterNodes needs. Hint: ask again once it is "
                         "InService.")  # fmt: skip


def plan(
    action: str, cluster: ClusterState, config: EnvironmentConfig, nodes: list[NodeState], *,
    force: bool, at: Any, target: str | None = None,
) -> Plan:  # fmt: skip
    """What `action` on `nodes` would do: the guards' refusals (lifted by `force`), the file's
    edit for a delete or a move (`at(path)` gives a key's FILE:LINE), the notes on jobs and the
    file. A move names its `target` group; a bad one is NodesError."""
    p = Plan(action, cluster.name, nodes, target=target, cluster_arn=cluster.arn)
    if action == "list":
        return p
    if action == "move":
        refused = move_refused(config, target)
        if refused is not None:
            raise NodesError(refused)
        assert target is not None
        _check_move(cluster, config, nodes, target)
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
    targets = {g.name: g.target for g in cluster.groups}
    if action == "delete":  # the group runs fewer nodes than the file says until a deploy
        p.edits = _edits(config, Counter({g: -k for g, k in taken.items()}), at, targets)
    elif action == "move":  # the source groups run fewer, the target more
        delta = Counter({g: -k for g, k in taken.items()})
        delta[target or ""] += len(nodes)
        p.edits = _edits(config, delta, at, targets)
    if config.orchestrator == "slurm":
        p.notes.append(slurm_note(action))
    return p


def _edits(
    config: EnvironmentConfig, delta: Counter[str], at: Any, targets: dict[str, int]
) -> list[Edit]:
    """Each group's count after a delete or move: HyperPod's target for it (the file's count
    when AWS has none) plus `delta` (negative: nodes deleted or moved away); the file should
    say that to keep them so."""
    edits = []
    for i, g in enumerate(config.cluster.instance_groups):
        if delta[g.name]:
            after = max(0, targets.get(g.name, g.instance_count) + delta[g.name])
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


def _calls(p: Plan) -> list[tuple[list[str], dict[str, Any]]]:
    """The node ids of each call and its parameters: 25 a call, or for a move 50 a call and one
    call per source group (the API takes one source and one target group)."""
    ids = [n.instance_id for n in p.nodes]
    if p.action != "move":
        return [(ids[s : s + PER_CALL], {"ClusterName": p.cluster})
                for s in range(0, len(ids), PER_CALL)]  # fmt: skip
    calls = []
    for group in dict.fromkeys(n.group for n in p.nodes):
        mine = [n.instance_id for n in p.nodes if n.group == group]
        for s in range(0, len(mine), MOVE_PER_CALL):
            params = {
                "SourceClusterArn": p.cluster_arn,
                "SourceInstanceGroupName": group,
                "TargetClusterArn": p.cluster_arn,
                "TargetInstanceGroupName": p.target,
            }
            calls.append((mine[s : s + MOVE_PER_CALL], params))
    return calls


def act(aws: AwsFacade, p: Plan) -> Outcome:
    """Call the action's operation (25 nodes a call; a move 50, per source group); each node's
    result."""
    operation = OPERATIONS[p.action]
    sagemaker = aws.client("sagemaker")
    method = getattr(sagemaker, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower())
    out = Outcome()
    calls = _calls(p)
    for k, (ids, params) in enumerate(calls):
        try:
            answer = aws.call(f"sagemaker:{operation}", method, NodeIds=ids, **params)
        except AwsUnavailableError as e:
            if k == 0:
                raise  # nothing done yet: the command's one line
            out.failed += [(i, f"not asked: {e}") for rest, _ in calls[k:] for i in rest]
            break
        out.done += [str(i) for i in answer.get("Successful", [])]
        for row in answer.get("Failed", []):
            code = row.get("ErrorCode") or row.get("Code") or ""
            out.failed.append((str(row.get("NodeId", "")), f"{code}: {row.get('Message', '')}"))
    return out
