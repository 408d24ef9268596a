"""Process settings for the entry points (the CLI, `app.py`): made before `aws_cdk` loads, and on
the way out."""

from __future__ import annotations

import gc
import os

# jsii prints a Node end-of-life banner (as `b'!!...'` lines) when the Node.js it runs on is past
# its end of life: noise for a user, who cannot act on it here. The variable lists the silenced
# major versions; the deprecation notice takes any value.
_NODE_MAJORS = [str(major) for major in range(12, 31)]


def silence_jsii() -> None:
    """Keep jsii's Node.js version banners out of our output (versions already listed stay)."""
    name = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
    listed = [v.strip() for v in os.environ.get(name, "").split(",") if v.strip()]
    os.environ[name] = ",".join(listed + [v for v in _NODE_MAJORS if v not in listed])
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")


def quick_exit() -> None:
    """Before a process that synthesized exits: take every live object out of the collector's
    sight. Tearing down the jsii object graph of a synthesized app otherwise costs the
    interpreter about 0.8 s at exit (measured on the default environment), every run; there is
    nothing left to free that the process's exit does not free. For entry points only: a
    process that goes on (a test run) would keep those objects forever."""
    gc.freeze()
