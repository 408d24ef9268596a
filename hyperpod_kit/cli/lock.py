"""`hyperpod-kit lock FILE`: write the environment's version lock without synthesizing.

Like the lock step of `synth` (hyperpod_kit/lock.py): pins from the file and the toolkit's tables,
a default that moved refused unless `--update`; `--from-deployed` also reads what the deployed
cluster runs (each EKS group's current AMI release, the EKS add-ons' versions) for the pins the file
leaves open, so that later synths deploy those and not "latest". The lock is replaced only when it
is one of ours (or with `--force`), through a temporary file renamed into place.
"""

from __future__ import annotations

import argparse
import sys

from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.config.pins import Pin, installed_addons
from hyperpod_kit.lock import (
    LockError,
    deployed_pins,
    lock_environment,
    lock_path,
    lock_write,
)
from hyperpod_kit.naming import eks_cluster_name
from hyperpod_kit.outputs import write_file

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def add_lock_parser(p: argparse.ArgumentParser) -> None:
    p.description = (
        "write FILE's version lock (<name>.lock.json beside it): the AMI release of each group, "
        "the Kubernetes, add-on and chart versions, the Slurm strategy, as the file, this "
        "hyperpod-kit's defaults and (with --from-deployed) the deployed cluster pin them; "
        "`synth` writes the same lock"
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="take this hyperpod-kit's defaults where they differ from the lock (else refused)",
    )
    p.add_argument(
        "--from-deployed",
        action="store_true",
        help="also read the deployed cluster (sagemaker:DescribeCluster, eks:DescribeAddon; "
        "needs credentials) for the versions the file leaves to AWS",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite a file there that is not a lock of ours"
    )


def lock(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    try:
        locked, resolution = lock_environment(
            loaded, update=args.update, replace_foreign=args.force
        )
    except LockError as e:
        for finding in e.findings:
            print(finding.render(loaded.file), file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in resolution.notes:  # what the lock carries and this version does not apply
        print(note.render(loaded.file), file=sys.stderr)
    pins = dict(resolution.pins)
    if args.from_deployed:
        read = _from_deployed(loaded)
        if read is None:
            return EXIT_BAD_INPUT
        pins.update(read)
    write = lock_write(locked, pins, force=args.force)
    write_file(write)
    path = lock_path(loaded.file)
    if not args.quiet:
        for pin in sorted(pins.values(), key=lambda p: p.key):
            value = pin.value if pin.value is not None else "(latest at deploy)"
            print(f"  {pin.key:<58} {value:<22} {pin.source}", file=sys.stderr)
    state = "written" if write.changes else "unchanged"
    print(f"{path}: {state} ({len(pins)} pins)", file=sys.stderr)
    return EXIT_OK


def _from_deployed(loaded: LoadedEnvironment) -> dict[str, Pin] | None:
    from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError

    config = loaded.config
    aws = AwsFacade(config.region)
    if not aws.has_credentials():
        print(
            f"{loaded.file}: --from-deployed needs AWS credentials, and none were found. Hint: "
            "set AWS_PROFILE (or run aws sso login), or leave --from-deployed out.",
            file=sys.stderr,
        )
        return None
    eks = eks_cluster_name(config) if config.orchestrator == "eks" else None
    try:
        cluster, addons = aws.deployed_versions(config.cluster_name, eks, installed_addons(config))
    except AwsUnavailableError as e:
        print(
            f"{loaded.file}: {e}. Hint: check the credentials' account and region.", file=sys.stderr
        )
        return None
    if cluster is None:
        print(
            f"{loaded.file}: no HyperPod cluster {config.cluster_name} in {config.region}: "
            "nothing deployed to read. Hint: deploy first, or leave --from-deployed out.",
            file=sys.stderr,
        )
        return None
    return deployed_pins(config, cluster, addons)
