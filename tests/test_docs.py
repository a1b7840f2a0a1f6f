"""The documentation stays true to the code: the generated configuration reference, the README's test command
(the one CI runs), links that resolve inside the repository, and no pointer to a document outside it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from sqlcmp_dagster.config_reference import render

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_configuration_reference_is_the_one_generated_from_eval_config() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(), (
        "docs/configuration.md has drifted from EvalConfig: run "
        "`python -m sqlcmp_dagster.config_reference docs/configuration.md`")


def test_the_reference_renders_each_option_with_its_type_default_bounds_and_description() -> None:
    class Options(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)

        mode: Literal["a", "b"] = "a"
        """Which one."""
        limit: int | None = Field(default=None, gt=0, le=1000)
        """At most this | that."""

    page = render(Options)
    assert '| `mode` | `"a"` \\| `"b"` | `"a"` |  | Which one. |' in page
    assert "| `limit` | `int` or null | null | > 0, <= 1,000 | At most this \\| that. |" in page


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"Run the tests:\n\n```sh\n(.+?)\n```", readme)
    assert len(blocks) == 1, "the README's 'Run the tests:' block is missing"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == blocks[0], "the README's test command and .ci/run's last line differ"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{doc.relative_to(ROOT)} links to {target}"


def test_no_doc_or_docstring_points_to_a_document_outside_the_repository() -> None:
    outside = re.compile(r"sqlcmp-spec|architecture\.txt|shared/spec|\bthe spec\b|\bspec's\b", re.IGNORECASE)
    sources = [*DOCS, *sorted((ROOT / "sqlcmp_dagster").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in sources
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if outside.search(line)]
    assert not found, "restate these in the project's own words:\n" + "\n".join(found)
