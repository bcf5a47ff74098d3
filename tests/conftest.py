"""Shared test fixtures: the third-party data in ``../shared`` and the Hypothesis profiles.

The corpora and vocabularies are never copied into the repository. They are found through one
place, :func:`shared_path`: ``$GUIDED_SHARED`` if set, else the ``shared`` folder beside the
repository root. When they are missing a test skips and says why, except under ``CI=true``, where
a missing file is a failure, because a green CI run that skipped its oracles proves nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"

settings.register_profile(
    "dev", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=600,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# A search beyond the CI budget, for a run of an hour or more (HYPOTHESIS_PROFILE=long).
settings.register_profile(
    "long",
    max_examples=1_000_000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if IN_CI else "dev"))


def shared_root() -> Path:
    """The folder that holds DESIGN.md, vocab/ and corpus/."""
    return Path(os.environ.get("GUIDED_SHARED", ROOT.parent / "shared"))


def present(path: Path, remedy: str) -> Path:
    """``path`` if it exists; else the test skips, or fails under CI, saying ``remedy``."""
    if not path.exists():
        reason = f"test data not found: {path} ({remedy})"
        if IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def shared_path(*parts: str) -> Path:
    """A path under the shared data folder; skips (or fails under CI) when it is absent."""
    return present(shared_root().joinpath(*parts), "set GUIDED_SHARED to its folder")


def draft_suite_path(draft: str) -> Path:
    """The JSON-Schema-Test-Suite folder of ``draft`` (``draft4``, ``draft6``, ``draft7``,
    ``draft2019-09``), which ``make suites`` unpacks from the pinned ``jsonschema`` sdist into
    ``$GUIDED_JSTS_DRAFTS``; skips (or fails under CI) when it is absent."""
    root = os.environ.get(
        "GUIDED_JSTS_DRAFTS", str(ROOT / ".venv" / "json-schema-test-suite" / "tests")
    )
    return present(Path(root) / draft, "run `make suites`")


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared data folder (see :func:`shared_path`)."""
    return shared_path()
