"""The error of a call to AWS that could not be made (`config.aws`), or to a cluster's
Kubernetes API (`config.kubernetes_api`): its own module, so that both raise it without
importing each other."""

from __future__ import annotations


class AwsUnavailableError(Exception):
    """The account could not be asked (no credentials, access denied, no network); `code` is
    the service's error code, "NoCredentials", or "" for a network or client-side failure."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code
