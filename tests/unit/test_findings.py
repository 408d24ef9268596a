"""`Finding`: one rendering of a problem, shared by the CLI, `app.py`, `plan` and the tests."""

from __future__ import annotations

import pytest

from hyperpod_kit.config.findings import ConfigError, Finding, Level, has_errors, sort_findings


@pytest.mark.parametrize(
    ("finding", "rendered"),
    [
        pytest.param(
            Finding(
                Level.ERROR,
                "storage.lustre.storage_capacity_gib",
                "2000 is not 1200 or a multiple of 2400 (PERSISTENT_2)",
                "use 2400",
                14,
            ),
            "environments/prod.yaml:14 storage.lustre.storage_capacity_gib: 2000 is not 1200 or a "
            "multiple of 2400 (PERSISTENT_2). Hint: use 2400.",
            id="error-with-line-and-hint",
        ),
        pytest.param(
            Finding(Level.ERROR, "name", "required key is missing.", "add 'name:' here.", 1),
            "environments/prod.yaml:1 name: required key is missing. Hint: add 'name:' here.",
            id="no-double-period",
        ),
        pytest.param(
            Finding(Level.ERROR, "nmae", "unknown key", "did you mean 'name'?", 3),
            "environments/prod.yaml:3 nmae: unknown key. Hint: did you mean 'name'?",
            id="question-mark-ends-the-hint",
        ),
        pytest.param(
            Finding(Level.ERROR, "region", "  trailing space  ", None, 2),
            "environments/prod.yaml:2 region: trailing space.",
            id="message-is-stripped",
        ),
        pytest.param(
            Finding(Level.ERROR, "(file)", "no such file", "give the path"),
            "environments/prod.yaml (file): no such file. Hint: give the path.",
            id="no-line",
        ),
        pytest.param(
            Finding(
                Level.WARNING,
                "network.vpc.private_subnet_cidr",
                "10.0.1.0/24 has 251 usable addresses",
                "use a /20 or larger",
                9,
            ),
            "environments/prod.yaml:9 warning: network.vpc.private_subnet_cidr: 10.0.1.0/24 has "
            "251 usable addresses. Hint: use a /20 or larger.",
            id="warning",
        ),
        pytest.param(
            Finding(Level.INFO, "storage.lustre.throughput_per_unit_storage", "300 MB/s", None, 16),
            "environments/prod.yaml:16 info: storage.lustre.throughput_per_unit_storage: 300 MB/s.",
            id="info-without-hint",
        ),
        pytest.param(
            Finding(Level.WARNING, "region", "unknown region", "check it"),
            "environments/prod.yaml warning: region: unknown region. Hint: check it.",
            id="warning-no-line",
        ),
    ],
)
def test_render(finding: Finding, rendered: str) -> None:
    """Every surface prints `FILE:LINE [level: ]path: message. Hint: hint.` exactly this way."""
    assert finding.render("environments/prod.yaml") == rendered


def test_render_has_no_double_period_anywhere() -> None:
    """A message or hint that already ends a sentence is not given a second full stop."""
    text = Finding(Level.ERROR, "a", "done.", "fix it!", 4).render("f.yaml")
    assert text == "f.yaml:4 a: done. Hint: fix it!"
    assert ".." not in text


def test_at_line_returns_a_copy() -> None:
    """Findings are frozen data: setting the line gives a new finding and keeps the old one."""
    f = Finding(Level.ERROR, "a", "m")
    g = f.at_line(7)
    assert (f.line, g.line) == (None, 7)
    assert g == Finding(Level.ERROR, "a", "m", line=7)
    with pytest.raises(AttributeError):
        f.line = 3  # type: ignore[misc]


def test_default_check_is_schema() -> None:
    """A finding made outside a validator is attributed to the schema phase."""
    assert Finding(Level.ERROR, "a", "m").check == "schema"


def test_levels_order_worst_highest() -> None:
    """`max()` over levels gives the worst one."""
    assert Level.ERROR > Level.WARNING > Level.INFO
    assert max([Level.INFO, Level.ERROR, Level.WARNING]) is Level.ERROR


def test_sort_findings_worst_first_then_by_line() -> None:
    """The first line printed is the one to fix first: errors before warnings, then file order."""
    findings = [
        Finding(Level.INFO, "i", "m", line=1),
        Finding(Level.WARNING, "w9", "m", line=9),
        Finding(Level.ERROR, "e20", "m", line=20),
        Finding(Level.WARNING, "w2", "m", line=2),
        Finding(Level.ERROR, "e5", "m", line=5),
        Finding(Level.ERROR, "b", "m"),
        Finding(Level.ERROR, "a", "m"),
    ]
    assert [f.path for f in sort_findings(findings)] == ["a", "b", "e5", "e20", "w2", "w9", "i"]


def test_sort_findings_is_stable_by_path_on_the_same_line() -> None:
    """Two findings on one line come out in path order, so output never flickers between runs."""
    findings = [Finding(Level.ERROR, p, "m", line=3) for p in ("c", "a", "b")]
    assert [f.path for f in sort_findings(findings)] == ["a", "b", "c"]
    assert sort_findings([]) == []


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        pytest.param([], False, id="none"),
        pytest.param([Level.INFO, Level.WARNING], False, id="warnings-only"),
        pytest.param([Level.INFO, Level.ERROR], True, id="one-error"),
        pytest.param([Level.ERROR], True, id="error-only"),
    ],
)
def test_has_errors(levels: list[Level], expected: bool) -> None:
    """Only an ERROR stops a file from becoming a config; warnings and infos never do."""
    assert has_errors(Finding(level, "p", "m") for level in levels) is expected


def test_config_error_renders_its_sorted_findings() -> None:
    """`str(ConfigError)` is exactly its findings, sorted worst first, one rendered line each."""
    findings = [
        Finding(Level.WARNING, "w", "careful", line=1),
        Finding(Level.ERROR, "b", "bad", "fix", line=8),
        Finding(Level.ERROR, "a", "worse", line=2),
    ]
    err = ConfigError("env.yaml", findings)
    assert err.file == "env.yaml"
    assert [f.path for f in err.findings] == ["a", "b", "w"]
    assert str(err) == "\n".join(f.render("env.yaml") for f in err.findings)
    assert str(err).splitlines() == [
        "env.yaml:2 a: worse.",
        "env.yaml:8 b: bad. Hint: fix.",
        "env.yaml:1 warning: w: careful.",
    ]
