"""Local stand-ins for what a HyperPod cluster provides, to run the real thing on one machine.

`slurm`: Debian's slurmctld, slurmd and munged on loopback, used by the Slurm integration tests
(node loss and requeue), the health-check runner tests and `make demo`.
`training`: the environment's training job rendered for this machine, and its output read back.
`health`: the node health runner's real command line on the local Slurm node.
`demo`: `make demo` (docs/demo.md).

Only `slurm` is imported here: the others need the dev venv (numpy, the trainer, matplotlib).
"""

from hyperpod_kit.local.slurm import (
    JobProcess,
    LocalSlurm,
    SlurmJob,
    SlurmUnavailableError,
    unavailable_reason,
)

__all__ = ["JobProcess", "LocalSlurm", "SlurmJob", "SlurmUnavailableError", "unavailable_reason"]
