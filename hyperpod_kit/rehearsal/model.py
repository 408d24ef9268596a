"""What the rehearsal reasons about: who calls AWS (an actor, as a role), when (a moment of the
deploy, in CloudFormation's order), and which call (a botocore operation and its parameters)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The last moment of a deploy: every stack exists (the day-2 actors: a job, a replaced node, a
# timer that runs later, a Studio user's app).
AFTER_DEPLOY = "after the deploy"


@dataclass(frozen=True)
class ResourceRef:
    """A resource of the assembly: the stack's id (nested stacks: ``parent/NestedLogicalId``) and
    its logical id."""

    stack: str
    logical_id: str

    def __str__(self) -> str:
        return f"{self.stack}/{self.logical_id}"


@dataclass(frozen=True)
class Moment:
    """When an actor runs: while CloudFormation creates `resource` (a node's first provisioning
    runs while the cluster resource is created; a custom resource's Lambda while the custom
    resource is), or after the whole deploy when `resource` is None."""

    label: str
    resource: ResourceRef | None = None

    @classmethod
    def after_deploy(cls, label: str = AFTER_DEPLOY) -> Moment:
        return cls(label, None)


@dataclass(frozen=True)
class Call:
    """One AWS call an actor made, as recorded.

    `service` and `operation` are botocore's names (``ssm``, ``PutParameter``); `params` the
    request's top-level parameters as the actor sent them (only the ones that name resources
    matter); `source` what was recorded (the CLI words, or ``boto3 ssm.put_parameter``);
    `error` the error code the rehearsal's fake AWS answered, whatever IAM says
    (``ParameterNotFound``: the parameter does not exist at that moment; ``NoSuchKey``), None when
    it answered."""

    actor: str
    role: ResourceRef
    moment: Moment
    service: str
    operation: str
    params: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    error: str | None = None


@dataclass(frozen=True)
class ActorFailure:
    """An actor that did not finish in its sandbox (a non-zero exit, an error it raised): on AWS
    it would fail the same way (a node's provisioning, a custom resource, a job). `output_tail`
    is the end of what it printed."""

    actor: str
    role: ResourceRef | None
    moment: Moment
    exit_code: int
    output_tail: str


@dataclass(frozen=True)
class SkippedActor:
    """Something in the assembly that calls AWS and that the rehearsal does not play (CDK's own
    functions, a job with no script), with the reason."""

    name: str
    reason: str
