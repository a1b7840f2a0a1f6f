"""LLMJudgeResource: the optional, advisory AI judge (Layer 5), disabled by default."""

from __future__ import annotations

import dagster as dg


class LLMJudgeResource(dg.ConfigurableResource):
    """Connection settings of the advisory judge. With ``enabled`` false (the default) no model is called and
    the judgments asset records that the judge was skipped by policy."""

    enabled: bool = False
    model: str = ""
    api_base: str | None = None
