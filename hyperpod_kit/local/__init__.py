"""Local stand-ins for what a HyperPod cluster provides, to run the real thing on one machine.

`slurm`: Debian's slurmctld, slurmd and munged on loopback, used by the Slurm integration tests
(node loss and requeue), the health-check runner tests and `make demo`.
"""

from hyperpod_kit.local.slurm import (
    JobProcess,
    LocalSlurm,
    SlurmJob,
    SlurmUnavailableError,
    unavailable_reason,
)

__all__ = ["JobProcess", "LocalSlurm", "SlurmJob", "SlurmUnavailableError", "unavailable_reason"]
