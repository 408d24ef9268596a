"""The job's container image, decided when `hyperpod-kit jobs` renders the job, never looked up
in SSM at run time (the cluster's execution role has no grant for that parameter, and a job
restarted after a redeploy must run the image it started with).

Where the URI comes from, in order: ``--image``; else the trainer stack's image, which is the
CDK asset of ``assets/trainer`` in the bootstrap's container-assets repository, so its tag (the
asset hash) is known offline (`hyperpod_kit.stacks.trainer.trainer_image_uri`). When the
environment file names no account, the URI carries `ACCOUNT` (`naming.ACCOUNT_PLACEHOLDER`) and
the job fills in the execution role's account (``aws sts get-caller-identity``, which needs no
IAM grant).

No CDK import here: the stacks compute the asset URI, the CLI passes it in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hyperpod_kit.naming import ACCOUNT_PLACEHOLDER

ACCOUNT = ACCOUNT_PLACEHOLDER

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:<tag>][@sha256:<digest>]
ECR_URI = re.compile(
    r"^(?P<account>[0-9]{12}|@ACCOUNT@)\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?"
    r"/(?P<repository>[a-z0-9._/-]+)(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?"
    r"(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
# Any registry's image with a digest: [registry/]repository[:tag]@sha256:<digest>
DIGEST_URI = re.compile(
    r"^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9._/-]+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
    r"@sha256:[0-9a-f]{64}$"
)
# What may reach the script at all (quoted there, but an image reference is never more).
_REFERENCE = re.compile(r"^[A-Za-z0-9@][A-Za-z0-9._:/@#-]*$")


class ImageError(ValueError):
    """The job has no image it can know, or an image reference that is not one."""


@dataclass(frozen=True)
class JobImage:
    """``uri``: the reference, possibly with `ACCOUNT`; ``source``: where it came from (said in
    the rendered job)."""

    uri: str
    source: str

    def __post_init__(self) -> None:
        if not _REFERENCE.match(self.uri) or "\n" in self.uri:
            raise ImageError(f"{self.uri!r} is not an image reference")

    @property
    def needs_account(self) -> bool:
        """The account is filled in on the node (the environment file names none)."""
        return ACCOUNT in self.uri

    @property
    def ecr(self) -> bool:
        """An ECR repository: the job resolves the tag's digest and logs enroot in."""
        return ECR_URI.match(self.uri) is not None

    @property
    def cacheable(self) -> bool:
        """A digest is knowable (ECR, or the reference names one): the job imports the image once
        per digest into a squashfs on FSx. Otherwise each node pulls it at each start."""
        return self.ecr or DIGEST_URI.match(self.uri) is not None


def given_image(uri: str) -> JobImage:
    return JobImage(uri=uri, source="--image")


def trainer_stack_image(uri: str) -> JobImage:
    """The trainer stack's image (`hyperpod_kit.stacks.trainer.trainer_image_uri`)."""
    tag = uri.rsplit(":", 1)[-1]
    return JobImage(uri=uri, source=f"the trainer stack's image, CDK asset {tag[:12]}")
