"""Layer 5: the optional, advisory LLM judge: it annotates, never overturns (docs/design.md).

The judge reads the deterministic report (metrics, evidence), the schema/context and bounded samples of both
results, and answers with the ten AI-judge metrics as JSON validated by pydantic. The guardrails are code, not
prompt: :func:`apply_judgment` can set ``ai_advisory_verdict`` and ``verdict_consistency_flag`` but never
``deterministic_verdict``; disagreement adds a consistency warning. Every failure of the model (bad JSON,
missing fields, timeouts, rate limits, provider errors) is retried a bounded number of times and then leaves
the judgment null with a warning: the deterministic report is untouched in every case.

Everything that crosses the model's boundary is bounded, because a case's text reaches the model and the model's
answer reaches the report: each part of the prompt that comes from the case (:data:`PROMPT_PART_CHARS`, so the
whole prompt stays under :data:`PROMPT_BOUND_CHARS`), the answer's length (``max_tokens`` asked for, and at most
:data:`MAX_ANSWER_CHARS` read), each evidence bullet (:data:`MAX_BULLET_CHARS`), the time of a whole call
(``timeout_s``), and the credentials an error may echo (masked before its text reaches a warning).

litellm is the only client (any provider, or any OpenAI-compatible server through ``api_base``). It is imported
on first use, with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that importing it never reaches the network.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sqlcmp_dagster.engine.atomic import atomic_path
from sqlcmp_dagster.engine.relation import Relation
from sqlcmp_dagster.engine.models import CompareRequest, EvidenceStrength, Report, Severity
from sqlcmp_dagster.engine.neighbor_report import neighborhood_of
from sqlcmp_dagster.engine.report import explanation_lines

PROMPT_VERSION = "sqlcmp-judge/4"

#: The most characters of each part of the prompt that comes from the case: the user's question, each query
#: (expected, actual, and the verified fix's), the schema/business context, the deterministic evidence (its
#: explanations and warnings quote the queries) and each result sample. A longer part is cut, and the cut is
#: stated in the prompt, so that one huge case cannot make a prompt the provider refuses or bills in full.
PROMPT_PART_CHARS = {"user_query": 2_000, "sql": 8_000, "context": 24_000, "evidence": 16_000, "sample": 8_000}
#: An upper bound of a whole prompt's length: the parts above (three queries, two samples) and the fixed text.
PROMPT_BOUND_CHARS = sum(PROMPT_PART_CHARS.values()) + 2 * PROMPT_PART_CHARS["sql"] \
    + PROMPT_PART_CHARS["sample"] + 4_000
#: The most characters of an answer that is read at all: a valid judgment is a few thousand characters, and a
#: longer answer (a model looping, or a server sending megabytes) is refused before parsing, as invalid.
MAX_ANSWER_CHARS = 20_000
#: The most characters of one evidence bullet kept in the judgment; a longer bullet is cut (see ``Judgment``).
MAX_BULLET_CHARS = 300

#: How an environment variable that may hold a credential is named: litellm reads provider keys from the
#: environment (``OPENAI_API_KEY``, ``AZURE_AD_TOKEN``, ``AWS_BEARER_TOKEN_BEDROCK``, ``WATSONX_APIKEY``,
#: ``VERTEXAI_CREDENTIALS``...), never from the config; a word of the name, wherever it stands, marks it.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL")
#: Credentials as a request or an error shows them: a bearer token anywhere, and the value of an authorization
#: or API-key header, in ``Header: value``, ``"Header": "value"`` or ``header=value`` form.
_CREDENTIAL_TEXT = re.compile(
    r"(?P<header>\b(?:proxy-)?(?:authorization|x-api-key|api-key)[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic|digest|token|apikey|key)\s+)?+)[^\s\"',;)}\[\]]+"
    r"|(?P<bearer>\bbearer\s+)[^\s\"',;)}\[\]]+", re.IGNORECASE)

_FALSE_POSITIVE_TASK = (
    "The deterministic checks PASSED this case. Look for a false positive: does the actual query only match "
    "on this database by accident (for example a filter that happens to select the same rows, or an "
    "unrequested ordering or limit), and would it fail the user's intent?")
_FALSE_NEGATIVE_TASK = (
    "The deterministic checks FAILED this case. Look for an acceptable deviation (a false negative): is the "
    "mismatch harmless (ordering only), acceptable (minor rounding, an extra informative column the question "
    "allows) or critical (wrong data)?")


class Judgment(BaseModel):
    """The ten AI-judge metrics, plus the advisory verdict they lead to. Nothing else: no
    reasoning trace is accepted or exposed."""

    model_config = ConfigDict(extra="ignore")

    intent_adequacy_judgment: Literal["adequate", "partially_adequate", "inadequate"]
    database_scoped_equivalence_judgment: Literal["equivalent", "not_equivalent", "inconclusive"]
    acceptable_deviation_judgment: Literal["none", "harmless", "acceptable", "critical"]
    short_rationale: str = Field(max_length=600)
    evidence_bullets: list[str] = Field(max_length=10)
    decision_summary: str = Field(max_length=600)
    severity_classification: Severity
    confidence: float = Field(ge=0, le=1)
    evidence_strength: EvidenceStrength
    ambiguous_case: bool
    advisory_verdict: Literal["pass", "fail"]

    @field_validator("evidence_bullets")
    @classmethod
    def cut_long_bullets(cls, bullets: list[str]) -> list[str]:
        """Each bullet at most :data:`MAX_BULLET_CHARS` characters, a longer one cut with a visible marker.

        Cut, not refused: a bullet is one cited signal among up to ten, and a wordy one says nothing against the
        judgment's labels, so refusing it would spend a retry and likely lose a usable judgment. The marker tells
        the reader the text is not the model's whole bullet. (An answer too long as a whole is refused before
        parsing, :data:`MAX_ANSWER_CHARS`, so this never holds megabytes.)"""
        return [cut_text(bullet, MAX_BULLET_CHARS) for bullet in bullets]


class JudgeConfig(BaseModel):
    """How to call the judge and when not to. ``model``/``api_base`` follow litellm's conventions."""

    model_config = ConfigDict(extra="forbid")

    model: str
    api_base: str | None = None
    api_key: str | None = None
    #: The time one call may take as a whole (a server sending a byte at a time never trips a per-read timeout).
    timeout_s: float = Field(default=30.0, gt=0)
    #: Sent as ``max_tokens``: the answer is a small JSON object, and without a bound a model that loops is paid
    #: for up to its context window.
    max_answer_tokens: int = Field(default=4096, ge=256, le=65_536)
    max_retries: int = Field(default=2, ge=0, le=10)
    max_sample_rows: int = Field(default=10, ge=0, le=200)
    skip_confident_pass: bool = True
    confident_pass_threshold: float = Field(default=0.95, ge=0, le=1)
    max_total_tokens: int | None = Field(default=None, gt=0)
    max_total_cost_usd: float | None = Field(default=None, gt=0)
    concurrency: int = Field(default=4, ge=1, le=64)
    cache_dir: str | None = None
    #: Passed through to ``litellm.acompletion`` (provider options; ``mock_response`` for offline tests).
    litellm_params: dict[str, Any] = Field(default_factory=dict)


@dataclass
class JudgeOutcome:
    """One call's result: the judgment (or None), what it cost, and why it is missing when it is."""

    judgment: Judgment | None
    metadata: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    skipped: str | None = None


class Budget:
    """A per-run token and cost budget shared by concurrent calls; once spent, further calls are skipped."""

    def __init__(self, max_tokens: int | None, max_cost_usd: float | None) -> None:
        self.max_tokens, self.max_cost = max_tokens, max_cost_usd
        self.tokens, self.cost = 0, 0.0
        self._lock = threading.Lock()

    def exhausted(self) -> str | None:
        with self._lock:
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return f"token budget of {self.max_tokens} reached"
            if self.max_cost is not None and self.cost >= self.max_cost:
                return f"cost budget of ${self.max_cost} reached"
        return None

    def spend(self, tokens: int, cost: float | None) -> None:
        with self._lock:
            self.tokens += tokens
            self.cost += cost or 0.0


class ResponseCache:
    """Raw model answers keyed by (model, prompt version, prompt hash): an unchanged case costs nothing twice.

    In memory, and in ``folder`` (one JSON file per key) when given, so that it survives between runs.
    """

    def __init__(self, folder: str | None = None) -> None:
        self.folder = Path(folder) if folder else None
        self._memory: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(model: str, prompt: str) -> str:
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        return hashlib.sha256(f"{model}\n{PROMPT_VERSION}\n{digest}".encode()).hexdigest()[:32]

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        if self.folder is not None and (self.folder / f"{key}.json").is_file():
            return cast(dict[str, Any], json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8")))
        return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self._memory[key] = entry
        if self.folder is not None:
            with atomic_path(self.folder / f"{key}.json") as partial:
                partial.write_text(json.dumps(entry), encoding="utf-8")


def skip_reason(report: Report, request: CompareRequest, config: JudgeConfig, budget: Budget) -> str | None:
    """Why the judge is not called for this case (policy), or None."""
    if not request.config.enable_ai_judge:
        return "judge disabled by policy (enable_ai_judge is false)"
    if report.blocked_reason is not None:
        return f"deterministic result blocked ({report.blocked_reason}): nothing for the judge to weigh"
    confidence = (report.diagnostic_scores or {}).get("confidence") or 0.0
    if config.skip_confident_pass and report.deterministic_verdict == "pass" and not report.warnings \
            and confidence >= config.confident_pass_threshold:
        return "deterministic pass with high confidence"
    return budget.exhausted()


def neighbor_evidence(report: Report) -> dict[str, Any] | None:
    """What the neighbor-database search says about this case, for the judge: whether the pass is robust
    (the search ran and found no counterexample, or the queries are proven equal), and the counterexample's
    sentence when there is one (the prompt says what a counterexample is: another database, not this one)."""
    found = neighborhood_of(report)
    if not found:
        return None
    example = found.get("counterexample")
    return {"search_ran": found["neighbor_search_ran"], "not_run_because": found.get("reason"),
            "neighbors_tried": found["neighbors_tried"],
            "robust_pass": report.deterministic_verdict == "pass" and not example and (
                found["neighbor_search_ran"] or bool(found.get("robust_by_structure"))),
            "counterexample": example["sentence"] if example else None}


def build_prompt(request: CompareRequest, report: Report, expected: Relation | None, actual: Relation | None,
                 max_rows: int) -> str:
    """The grounded prompt: the task for this verdict, the question, both queries, the deterministic evidence,
    the context and bounded samples of both results (with the truncation stated). Each part that comes from the
    case is cut to its :data:`PROMPT_PART_CHARS` bound, the cut stated where it is."""
    task = _FALSE_POSITIVE_TASK if report.deterministic_verdict == "pass" else _FALSE_NEGATIVE_TASK
    evidence = {
        "deterministic_verdict": report.deterministic_verdict,
        "severity": report.severity,
        "overall_score": report.overall_score,
        "result_metrics": _without_rows(report.metrics.get("result")),
        "diagnostics": {k: v for k, v in (report.diagnostic_scores or {}).items()
                        if k not in ("evidence", "suggested_fix")},
        "explanations": explanation_lines(report),
        "warnings": report.warnings,
        "neighbor_databases": neighbor_evidence(report),
    }
    expected_sql = report.metrics["validation"]["normalized_sql_expected"] if report.metrics.get("validation") \
        else None
    limits = PROMPT_PART_CHARS
    context = json.dumps(request.context, default=str) if request.context else "(none)"
    parts = [
        f"You are the advisory judge of a text-to-SQL evaluation (prompt {PROMPT_VERSION}). The deterministic "
        "verdict below is authoritative and will not change; your judgment is advisory. Judge equivalence "
        "(database_scoped_equivalence_judgment) only as observed on this database, never universally. The "
        "evidence's neighbor_databases is not about this database: a counterexample there is a database the "
        "schema allows, built by the deterministic engine, on which both queries were run and differ; weigh it "
        "for the user's intent and for whether a pass is an accident of this database's rows.",
        f"Task: {task}",
        f"User question: {cut_text(request.user_query or '(not given)', limits['user_query'])}",
        f"Expected SQL: {cut_text(expected_sql or request.expected_sql[0], limits['sql'])}",
        f"Actual SQL: {cut_text(request.actual_sql, limits['sql'])}",
        f"Schema and business context: {cut_text(context, limits['context'])}",
        f"Deterministic evidence (JSON): {cut_text(json.dumps(evidence, default=str), limits['evidence'])}",
        _verified_fix(report),
        _sample("Expected result", expected, max_rows),
        _sample("Actual result", actual, max_rows),
        "Answer with one JSON object and nothing else, with exactly these keys: "
        "intent_adequacy_judgment (adequate|partially_adequate|inadequate), database_scoped_equivalence_judgment "
        "(equivalent|not_equivalent|inconclusive), acceptable_deviation_judgment (none|harmless|acceptable|"
        "critical), short_rationale (one or two sentences), evidence_bullets (list of at most 10 deterministic "
        "signals you used, most important first, each one short sentence), decision_summary (final label and "
        "justification, no reasoning steps), severity_classification (pass|minor issue|moderate issue|major "
        "issue|critical failure), confidence (0 to 1), evidence_strength (low|medium|high), ambiguous_case "
        "(true|false), advisory_verdict (pass|fail).",
    ]
    return "\n\n".join(parts)


def _verified_fix(report: Report) -> str:
    """The verified minimal fix as evidence: a corrected query that was run, not one to propose."""
    fix = (report.diagnostic_scores or {}).get("suggested_fix")
    if fix is None:
        return "Verified fix: none searched (the case passed, or it could not be re-executed)."
    if not fix["found"]:
        return f"Verified fix: {fix['explanation']}."
    branches = fix.get("branches") or [None] * len(fix["clauses"])  # a set operation's fix names its branches
    changed = ", ".join(c if b is None else f"{c} (branch {b})" for c, b in zip(fix["clauses"], branches))
    return (f"Verified fix (proven by execution on this database, not a guess): transplanting "
            f"{changed} from the expected query gives a query whose results match: "
            f"{cut_text(fix['sql'], PROMPT_PART_CHARS['sql'])}")


async def judge_case(prompt: str, config: JudgeConfig, cache: ResponseCache, budget: Budget) -> JudgeOutcome:
    """Ask the model (or the cache); bounded retries; never raises."""
    key = ResponseCache.key(config.model, prompt)
    try:
        cached = cache.get(key)
        if cached is not None:
            return JudgeOutcome(Judgment.model_validate(cached["judgment"]),
                                {**cached["metadata"], "cached": True, "cost_usd": 0.0})
    except Exception:  # noqa: BLE001 - an entry of an older Judgment, or a damaged file: asked again instead
        pass
    litellm = _litellm()
    warnings: list[str] = []
    started = time.perf_counter()
    for attempt in range(config.max_retries + 1):
        try:
            # ``timeout`` bounds each read, which a server sending a byte a second never trips: the deadline
            # bounds the whole call, so such a server ends it like a silent one does.
            response = await asyncio.wait_for(litellm.acompletion(
                model=config.model, messages=[{"role": "user", "content": prompt}], api_base=config.api_base,
                api_key=config.api_key, timeout=config.timeout_s, temperature=0, num_retries=0,
                response_format={"type": "json_object"},
                **{**config.litellm_params, "max_tokens": config.max_answer_tokens}), timeout=config.timeout_s)
        except TimeoutError:  # the deadline's own (litellm's Timeout is not a TimeoutError)
            warnings.append(f"judge call {attempt + 1} failed: Timeout: the judge ran past its time "
                            f"({config.timeout_s:g} s for the whole call)")
            await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
            continue
        except Exception as error:  # litellm maps every provider failure to an exception of its own
            warnings.append(f"judge call {attempt + 1} failed: {type(error).__name__}: {_short(error, config)}")
            await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
            continue
        usage = getattr(response, "usage", None)
        tokens = {"prompt_tokens": getattr(usage, "prompt_tokens", None),
                  "completion_tokens": getattr(usage, "completion_tokens", None),
                  "total_tokens": getattr(usage, "total_tokens", None)}
        cost = _cost(litellm, response)
        budget.spend(tokens["total_tokens"] if isinstance(tokens["total_tokens"], int) else 0, cost)
        try:
            judgment = _judgment_of(response)
        except Exception as error:  # noqa: BLE001 - whatever the answer holds, it is this case's alone
            warnings.append(f"judge answer {attempt + 1} is not a valid judgment: {type(error).__name__}: "
                            f"{_short(error, config)}")
            continue
        metadata = {"model": config.model, "prompt_version": PROMPT_VERSION, "token_usage": tokens,
                    "cost_usd": cost, "latency_ms": (time.perf_counter() - started) * 1000,
                    "attempts": attempt + 1, "cached": False}
        cache.put(key, {"judgment": judgment.model_dump(), "metadata": metadata})
        return JudgeOutcome(judgment, metadata, warnings)
    metadata = {"model": config.model, "prompt_version": PROMPT_VERSION, "token_usage": None, "cost_usd": None,
                "latency_ms": (time.perf_counter() - started) * 1000, "attempts": config.max_retries + 1,
                "cached": False}
    return JudgeOutcome(None, metadata, [*warnings, "AI judge gave no valid judgment; judgment is null"])


def apply_judgment(report: Report, outcome: JudgeOutcome) -> Report:
    """The report with the advisory judgment added: ``deterministic_verdict`` and every deterministic field
    stay as they were, whatever the judgment says."""
    # Only these three containers change (top-level keys and items added): copies of them, not of the whole
    # report (a deep copy of every report was about 15% of case_reports' time with the judge off).
    updated = report.model_copy(update={"run_metadata": dict(report.run_metadata), "warnings": list(report.warnings),
                                        "metrics": dict(report.metrics)})
    updated.run_metadata["judge"] = {**outcome.metadata, "skipped": outcome.skipped}
    updated.warnings = [*updated.warnings, *outcome.warnings]
    judgment = outcome.judgment
    if judgment is None:
        return updated
    updated.metrics["ai_judge"] = judgment.model_dump(exclude={"advisory_verdict"})
    updated.ai_advisory_verdict = judgment.advisory_verdict
    updated.verdict_consistency_flag = judgment.advisory_verdict == report.deterministic_verdict
    if not updated.verdict_consistency_flag:
        updated.warnings.append(f"consistency warning: the advisory AI verdict ({judgment.advisory_verdict}) "
                                f"disagrees with the deterministic verdict ({report.deterministic_verdict}); "
                                "the deterministic verdict stands")
    assert updated.deterministic_verdict == report.deterministic_verdict  # the guardrail, enforced
    return updated


@dataclass
class PendingJudgment:
    """A case ready for the judge: its deterministic report and the prompt, built while the results were at
    hand (so that a batch keeps prompts, not result tables, until the judge runs)."""

    request: CompareRequest
    report: Report
    prompt: str | None


def prepare(request: CompareRequest, report: Report, expected: Relation | None, actual: Relation | None,
            config: JudgeConfig) -> PendingJudgment:
    """The prompt for a case the policy lets through (no prompt when it is skipped anyway)."""
    prompt = None
    if skip_reason(report, request, config, Budget(None, None)) is None:
        prompt = build_prompt(request, report, expected, actual, config.max_sample_rows)
    return PendingJudgment(request, report, prompt)


def judge_reports(pending: list[PendingJudgment], config: JudgeConfig, *, cache: ResponseCache | None = None,
                  budget: Budget | None = None) -> list[JudgeOutcome]:
    """Judge many cases with at most ``config.concurrency`` calls in flight; outcomes come back in order."""
    cache = cache or ResponseCache(config.cache_dir)
    budget = budget or Budget(config.max_total_tokens, config.max_total_cost_usd)

    async def run_all() -> list[JudgeOutcome]:
        gate = asyncio.Semaphore(config.concurrency)

        async def one(item: PendingJudgment) -> JudgeOutcome:
            async with gate:
                reason = skip_reason(item.report, item.request, config, budget)
                if reason is not None or item.prompt is None:
                    return JudgeOutcome(None, {"model": config.model, "prompt_version": PROMPT_VERSION},
                                        skipped=reason or "skipped by policy")
                return await judge_case(item.prompt, config, cache, budget)

        return list(await asyncio.gather(*(one(item) for item in pending)))

    return asyncio.run(run_all())


def _litellm() -> Any:
    """litellm, imported at the judge's first call with its bundled price list: its import fetches the list
    from the network unless ``LITELLM_LOCAL_MODEL_COST_MAP`` says otherwise, so the variable is set (where the
    user did not set it) for that import only, and the process's environment is left as it was."""
    local = "litellm" not in sys.modules and "LITELLM_LOCAL_MODEL_COST_MAP" not in os.environ
    if local:
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    try:
        import litellm
    finally:
        if local:
            os.environ.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)

    litellm.suppress_debug_info = True  # its help banner would otherwise go to stdout, into JSON output
    return litellm


def _cost(litellm: Any, response: Any) -> float | None:
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # a model litellm has no price for (a local server): cost unknown, not an error
        return None


def _judgment_of(response: Any) -> Judgment:
    """The judgment in the model's ``response``; raises whatever its content makes fail. The content is the
    model's, and a case's text reaches the model: an answer without choices, JSON nested beyond the parser's
    recursion limit or a value of another type fails here, for that case only (such an answer ended the whole
    batch, every report lost, when only JSON and validation errors were caught)."""
    content = response.choices[0].message.content or ""
    if len(content) > MAX_ANSWER_CHARS:
        raise ValueError(f"the answer is {len(content)} characters, more than the {MAX_ANSWER_CHARS} read")
    return Judgment.model_validate(json.loads(_json_text(content)))


def _json_text(content: str) -> str:
    """The JSON object in ``content``, tolerating a Markdown code fence around it."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("{"):]
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if start != -1 and end > start else text


def _sample(label: str, relation: Relation | None, max_rows: int) -> str:
    """The first ``max_rows`` rows of ``relation``, their JSON cut to the sample's bound: a few wide rows or
    large cells would otherwise fill the prompt however few rows are shown."""
    if relation is None:
        return f"{label}: (not available)"
    shown = relation.to_rows(limit=max_rows)
    note = (f" (first {max_rows} of {relation.height} rows; the rest are truncated)"
            if relation.height > max_rows else f" ({relation.height} rows, all shown)")
    return f"{label}{note}: {cut_text(json.dumps(shown, default=str), PROMPT_PART_CHARS['sample'])}"


def cut_text(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its first ``limit`` with a marker saying so: the
    reader (the model, or a report's reader) must know the text is not whole."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [cut: the first {limit} of {len(text)} characters shown]"


def _without_rows(result: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if result is None else {k: v for k, v in result.items() if k != "schema_match"} | {
        "schema_match": {k: v for k, v in result["schema_match"].items() if k != "column_mapping"}}


def _short(error: Exception, config: JudgeConfig) -> str:
    """The first line of ``error``'s message, at most 300 characters, with every credential it may hold written
    as ``[redacted]``: a provider or gateway may echo the request's ``Authorization`` header in its error, and
    the message goes into the case's report. Masked: ``config``'s API key and any password in its ``api_base``,
    the values (of 8 characters or more) of the environment variables named like credentials, which litellm
    reads when the config gives no key, and any bearer token or authorization/API-key header value, whichever
    key it holds (one of a gateway's own, or one from a variable of another name)."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    configured = [config.api_key or "", urlsplit(config.api_base or "").password or ""]
    secrets = {secret for secret in configured if len(secret) >= 4} | {
        value.strip() for name, value in os.environ.items()
        if _SECRET_NAME.search(name.upper()) and len(value.strip()) >= 8}
    for secret in sorted(secrets, key=len, reverse=True):  # a secret holding another is masked whole
        line = line.replace(secret, "[redacted]")
    line = _CREDENTIAL_TEXT.sub(lambda found: f"{found['header'] or found['bearer']}[redacted]", line)
    return line[:300]
