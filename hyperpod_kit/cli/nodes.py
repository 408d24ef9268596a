"""`hyperpod-kit nodes FILE list | replace | reboot | delete | move [ID ...]`: act on the deployed
cluster's nodes through HyperPod's node operations (`hyperpod_kit.operations.nodes`), with
guards, a dry run on more than one node, and what the action changes against the file said
plainly. `--print-policy` prints the operator's least-privilege IAM policy (no AWS call).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING

from hyperpod_kit.cli.status import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    _facade,
    _nothing,
    _unavailable,
)
from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.text import printable

if TYPE_CHECKING:
    from hyperpod_kit.config.aws import AwsFacade
    from hyperpod_kit.config.schema import EnvironmentConfig
    from hyperpod_kit.operations.nodes import Plan
    from hyperpod_kit.operations.status import ClusterState, NodeState
    from hyperpod_kit.outputs import FileWrite

NODES_HELP = (
    "list the cluster's nodes, or replace, reboot, delete or move some (by id, --group, "
    "--unhealthy), "
    "with guards and a dry run on more than one node; --print-policy: the operator's IAM policy"
)
# operations.nodes.ACTIONS, without importing boto3 for the parser
ACTIONS = ("list", "replace", "reboot", "delete", "move")
DELETE_NOTE = (
    "The file: delete lowers what runs below the file's count; CloudFormation restores it at "
    "the first deploy that touches the cluster resource, which may be weeks later. To keep the "
    "nodes deleted, edit the file:"
)
MOVE_NOTE = (
    "The file: move leaves the groups' counts away from the file's; CloudFormation sets them "
    "back at the first deploy that touches the cluster resource (new nodes in the source group, "
    "nodes removed from the target), which may be weeks later. To keep the move, edit the file:"
)

_NODES_EPILOG = """\
list is read-only. replace: HyperPod terminates the instance and provisions a new one (its
volumes are lost); reboot: a clean reboot (volumes kept); delete: the instance is terminated and
the group runs one node fewer than the file says until the next deploy that touches the cluster
resource brings it back: the edit to the file is printed as FILE:LINE, and --edit-file makes it
(that number on that line, in the file given or the base it extends; checked before anything is
done). On Slurm the API does not drain the node: a job running on it ends (docs/day2.md). move
--to GROUP (MoveClusterNodes; EKS with continuous provisioning only): the instance leaves its
group for GROUP of the same cluster, keeping its id and capacity; its EBS volumes are replaced;
the edits to both groups' counts are printed as FILE:LINE.

Guards: the controller group's nodes and every node of a group at once are refused without
--force; more than one node is a dry run (what would be done) without --yes.

exit codes:
  0  listed, done, or a dry run printed (nothing to do: 0 too)
  1  HyperPod refused some of the nodes, or a call failed after earlier ones went through
     (each node not done named, with its error)
  2  bad input: the file, an id that is no instance id or no node of the cluster, an unknown
     group, a node a guard refuses without --force, --edit-file on a line that does not hold
     the count as a plain number (nothing deleted, nothing written), a move without --to, to a
     group of another instance type or on a cluster that cannot move nodes, no credentials, the
     account cannot be asked, or nothing deployed (one line says which)"""


def add_nodes_arguments(nd: argparse.ArgumentParser) -> None:
    nd.epilog = _NODES_EPILOG
    nd.formatter_class = argparse.RawDescriptionHelpFormatter
    nd.add_argument("action", nargs="?", metavar="ACTION",
                    help=f"{' | '.join(ACTIONS)} (list)")  # fmt: skip
    nd.add_argument("ids", nargs="*", metavar="ID", help="instance ids (i-...) of the nodes")
    nd.add_argument("--group", metavar="NAME", help="the nodes of this instance group")
    nd.add_argument(
        "--to", metavar="GROUP", help="move: the instance group of the same cluster they go to"
    )
    nd.add_argument("--unhealthy", action="store_true",
                    help="the nodes `status` judges unhealthy (in Failure, or the health "
                    "runner's verdict or the EKS label says so)")  # fmt: skip
    nd.add_argument(
        "--force",
        action="store_true",
        help="allow the controller group's nodes and every node of a group at once",
    )
    nd.add_argument("--yes", action="store_true", help="act on more than one node (no dry run)")
    nd.add_argument(
        "--dry-run", action="store_true", help="print what would be done, even for one node"
    )
    nd.add_argument("--format", choices=["text", "json"], default="text",
                    help="list: text or JSON on stdout (text)")  # fmt: skip
    nd.add_argument("--edit-file", action="store_true",
                    help="delete: also write the edit that keeps the nodes deleted into the "
                    "environment file (or the base it extends, where the count is written): that "
                    "one number on its line, every other byte kept. It edits your own file in "
                    "place, as asked; refused before anything is done when the line does not hold "
                    "the count as a plain number (an anchor, alias or merge)")  # fmt: skip
    nd.add_argument("--print-policy", action="store_true",
                    help="print the operator's least-privilege IAM policy for this environment "
                    "(JSON on stdout; no AWS call) and exit")  # fmt: skip


def file_first(args: argparse.Namespace, default_file: str) -> None:
    """`nodes list ...` without a file: the first word is the action, the file the default."""
    if args.file in ACTIONS:
        words = [args.action] if args.action is not None else []
        args.action, args.ids, args.file = args.file, [*words, *args.ids], default_file
    args.action = args.action or "list"


def nodes(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.config.aws import AwsUnavailableError
    from hyperpod_kit.operations.nodes import NodesError
    from hyperpod_kit.operator_policy import operator_policy

    if args.print_policy:
        if not loaded.config.account:
            print(f"{loaded.file}: no account in the file: the policy names any account (*). "
                  "Hint: set account: to pin it.", file=sys.stderr)  # fmt: skip
        print(json.dumps(operator_policy(loaded.config), indent=2))
        return EXIT_OK
    try:
        refused = _words_refused(args, loaded.config)
        aws = None if refused is not None else _facade(loaded)
        if refused is not None:
            print(refused, file=sys.stderr)
        if aws is None:
            return EXIT_BAD_INPUT
        cluster = _cluster(loaded, args, aws)
        if cluster is None:
            return EXIT_BAD_INPUT
        return _run(loaded, args, aws, cluster)
    except NodesError as e:
        print(f"nodes {args.action}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except AwsUnavailableError as e:
        return _unavailable(loaded, e)


def _words_refused(args: argparse.Namespace, config: EnvironmentConfig) -> str | None:
    """Why the action and its selection cannot be, before AWS is asked; None when they can."""
    refused = _options_refused(args)
    if refused is not None:
        return refused
    from hyperpod_kit.operations.nodes import NodesError, check_ids, move_refused

    if args.action == "move":
        refused = move_refused(config, args.to)
        if refused is not None:
            return f"nodes move: {refused}"

    try:
        check_ids(args.ids)
    except NodesError as e:
        return f"nodes {args.action}: {e}"
    return None


def _options_refused(args: argparse.Namespace) -> str | None:
    """Why the options do not go together (the action, its selection, --edit-file, --to)."""
    if args.action not in ACTIONS:
        return (f"nodes: {args.action!r} is not an action. Hint: one of {', '.join(ACTIONS)}, "
                "after the file: hyperpod-kit nodes FILE replace i-0123456789abcdef0.")  # fmt: skip
    if args.edit_file and args.action != "delete":
        return (f"nodes {args.action}: --edit-file goes with delete (the only action that "
                "changes what the file should say). Hint: drop --edit-file.")  # fmt: skip
    if args.action != "list" and not (args.ids or args.group or args.unhealthy):
        return (f"nodes {args.action}: no node named. Hint: give instance ids, --group NAME or "
                "--unhealthy.")  # fmt: skip
    if getattr(args, "to", None) and args.action != "move":
        return (f"nodes {args.action}: --to is for move only. Hint: hyperpod-kit nodes FILE "
                "move ID --to GROUP.")  # fmt: skip
    return None


def _cluster(
    loaded: LoadedEnvironment, args: argparse.Namespace, aws: AwsFacade
) -> ClusterState | None:
    """The deployed cluster with its nodes (and their health where it is shown or selects);
    None after one line when it is not there."""
    from hyperpod_kit.naming import parameter_name
    from hyperpod_kit.operations.discovery import discover
    from hyperpod_kit.operations.status import cluster_state

    deployed = discover(loaded.config.name, aws)
    if deployed.nothing:
        _nothing(loaded)
        return None
    read_logs = args.action == "list" or args.unhealthy
    cluster = cluster_state(aws, deployed, loaded.config, read_logs=read_logs)
    if cluster is None or cluster.status == "NotFound":
        print(f"{loaded.file}: the cluster of environment {loaded.config.name} is not there "
              f"(no {parameter_name(loaded.config.name, 'cluster')} parameter, or no such "
              f"cluster). Hint: `hyperpod-kit status {loaded.file}` shows how far the deploy "
              "got.", file=sys.stderr)  # fmt: skip
        return None
    return cluster


def _run(
    loaded: LoadedEnvironment, args: argparse.Namespace, aws: AwsFacade, cluster: ClusterState
) -> int:
    from hyperpod_kit.operations import nodes as ops

    chosen = ops.select(cluster, loaded.config, ids=args.ids, group=args.group,
                        unhealthy=args.unhealthy)  # fmt: skip
    if args.action == "list":
        return _list(cluster, chosen, as_json=args.format == "json")
    if not chosen:
        print(f"nodes {args.action}: no node of cluster {cluster.name} matches; nothing done",
              file=sys.stderr)  # fmt: skip
        return EXIT_OK
    p = ops.plan(args.action, cluster, loaded.config, chosen, force=args.force, at=loaded.at,
                 target=args.to)  # fmt: skip
    for r in p.refused:
        print(f"nodes {args.action}: {r.node.instance_id} refused: {r.why}. Hint: --force if "
              "that is meant.", file=sys.stderr)  # fmt: skip
    if p.refused:
        return EXIT_BAD_INPUT
    return _carry_out(p, args, aws)


def _carry_out(p: Plan, args: argparse.Namespace, aws: AwsFacade) -> int:
    from hyperpod_kit.operations import nodes as ops

    dry = args.dry_run or (len(p.nodes) > 1 and not args.yes)
    sys.stdout.write(printable(render_plan(p, dry=dry)))
    if args.edit_file and p.edits and _file_writes(p) is None:
        return EXIT_BAD_INPUT  # checked before anything is done: nothing deleted, nothing written
    if dry:
        print(f"dry run: nothing done. Hint: --yes to {args.action} these {len(p.nodes)} nodes.",
              file=sys.stderr)  # fmt: skip
        return EXIT_OK
    out = ops.act(aws, p)
    for node in out.done:
        print(printable(f"{args.action}: {node} started"
                        + (f" (to group {p.target}; status shows it DetachInProgress, then "
                           "AttachInProgress)" if p.action == "move" else "")))  # fmt: skip
    for node, why in out.failed:
        print(printable(f"{args.action}: {node} not done: {why}"), file=sys.stderr)
    if args.edit_file and p.edits:
        return _edit_file(p, out.failed)  # the nodes deleted: the file next
    return EXIT_FAILED if out.failed else EXIT_OK


def _file_writes(p: Plan, *, after: str = "Nothing done.") -> list[FileWrite] | None:
    """The environment files with the delete's edits made, checked by the output layer (the
    files are inputs of this command, updated in place as --edit-file asks); None after one
    line when an edit cannot be made (the plan printed above shows it, to make by hand)."""
    from hyperpod_kit.config.file_edit import CountEdit, EditRefusedError, apply, read_text
    from hyperpod_kit.files import fileio
    from hyperpod_kit.outputs import check_file

    texts: dict[str, tuple[bytes, str]] = {}
    try:
        for e in p.edits:
            file, _, line = e.at.rpartition(":")
            group = re.fullmatch(r".*\[(.+)\]\.(\w+)", e.path)
            if not file or not line.isdigit() or group is None:
                raise EditRefusedError(f"{e.at} {e.path}: no line to edit; nothing was "
                                       f"written. Hint: edit it by hand: {e.before} -> "
                                       f"{e.after}.")  # fmt: skip
            bom, text = texts.get(file) or read_text(file)
            edit = CountEdit(file, int(line), group[2], group[1], e.before, e.after)
            texts[file] = bom, apply(edit, text)
        return [check_file(file, bom.decode("utf-8") + text, force=True, shown=file,
                           updates=file) for file, (bom, text) in texts.items()]  # fmt: skip
    except (EditRefusedError, fileio.PathError) as e:
        print(printable(f"nodes delete --edit-file: {e} {after}"), file=sys.stderr)
        return None


def _edit_file(p: Plan, failed: list[tuple[str, str]]) -> int:
    """After the delete: write the edits (made again on the files as they are now)."""
    from hyperpod_kit.outputs import write_error, write_file

    if failed:
        print("nodes delete --edit-file: not all nodes were deleted; the file was not edited. "
              "Hint: edit it by hand for the nodes deleted.", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    writes = _file_writes(p, after="The nodes are deleted; the file is not edited.")
    if writes is None:
        return EXIT_FAILED  # the nodes are deleted; the line above says why the file is not
    try:
        for w in writes:
            write_file(w)
    except OSError as e:
        print(write_error(e, writes[0].target), file=sys.stderr)
        return EXIT_FAILED
    for edit in p.edits:
        print(printable(f"edited {edit.render()}"))
    return EXIT_OK


def render_plan(p: Plan, *, dry: bool) -> str:
    would = "would " if dry else ""
    to = f" to group {p.target}" if p.action == "move" else ""
    out = [f"cluster {p.cluster}: {would}{p.action} {len(p.nodes)} node(s){to}:"]
    out += [f"  {n.instance_id} {n.group} {n.status} health {n.health.value}" for n in p.nodes]
    if p.action == "move":
        from hyperpod_kit.operations.nodes import SOURCES, WHAT_HAPPENS

        out.append(f"{WHAT_HAPPENS['move']}. Source: {SOURCES['move']}")
    if p.edits:
        out.append(MOVE_NOTE if p.action == "move" else DELETE_NOTE)
        out += [f"  {e.render()}" for e in p.edits]
    elif p.action in ("delete", "move"):
        out.append(f"The file: each group's count after the {p.action} is the file's; no edit "
                   "needed.")  # fmt: skip
    out += p.notes
    return "\n".join(out) + "\n"


def _list(cluster: ClusterState, chosen: list[NodeState], *, as_json: bool) -> int:
    from dataclasses import asdict, replace

    from hyperpod_kit.cli.status import _render_cluster

    if as_json:
        found = {"cluster": cluster.name, "status": cluster.status,
                 "nodes": [asdict(n) for n in chosen]}  # fmt: skip
        print(json.dumps(found, indent=2, default=str))
        return EXIT_OK
    lines = _render_cluster(replace(cluster, nodes=chosen))
    sys.stdout.write(printable("\n".join(lines) + "\n"))
    return EXIT_OK
