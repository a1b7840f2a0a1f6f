"""LLMJudgeResource: the optional, advisory AI judge (Layer 5), disabled by default."""

from __future__ import annotations

import dagster as dg

from sqlcmp_dagster.engine.judge import JudgeConfig
from sqlcmp_dagster.engine.models import CompareRequest


class LLMJudgeResource(dg.ConfigurableResource):
    """Connection and policy of the advisory judge (litellm ``model`` and ``api_base``).

    With ``enabled`` false (the default) no model is called. When enabled, cases whose own config does not
    set ``enable_ai_judge`` are judged; a case can still opt out with ``enable_ai_judge: false``. Keys come from
    the provider's usual environment variables, or ``api_key`` (use ``dg.EnvVar``).
    """

    enabled: bool = False
    model: str = ""
    api_base: str | None = None
    api_key: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 2
    concurrency: int = 4
    max_total_tokens: int | None = None
    max_total_cost_usd: float | None = None
    cache_dir: str | None = None

    def judge_config(self) -> JudgeConfig | None:
        if not self.enabled:
            return None
        if not self.model:
            raise ValueError("LLMJudgeResource is enabled but names no model")
        return JudgeConfig(model=self.model, api_base=self.api_base, api_key=self.api_key,
                           timeout_s=self.timeout_s, max_retries=self.max_retries, concurrency=self.concurrency,
                           max_total_tokens=self.max_total_tokens, max_total_cost_usd=self.max_total_cost_usd,
                           cache_dir=self.cache_dir)

    def with_policy(self, request: CompareRequest) -> CompareRequest:
        """``request`` with ``enable_ai_judge`` on when the deployment enables the judge and the case is silent."""
        if not self.enabled or "enable_ai_judge" in request.config.model_fields_set:
            return request
        return request.model_copy(update={"config": request.config.model_copy(update={"enable_ai_judge": True})})
