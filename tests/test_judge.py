"""The advisory judge: offline with litellm's mock responses, and over real HTTP against a local
OpenAI-compatible server on loopback that answers well, answers garbage, rate-limits or hangs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import JUDGE_PASS, ChatServer, forget_reports
from sqlcmp_dagster.engine.judge import MAX_ANSWER_CHARS, MAX_BULLET_CHARS, PROMPT_BOUND_CHARS, \
    PROMPT_VERSION, Budget, JudgeConfig, ResponseCache, build_prompt, judge_reports, prepare
from sqlcmp_dagster.engine.models import CompareRequest, EvalConfig, Report
from sqlcmp_dagster.engine.pipeline import Evaluator

GOOD = JUDGE_PASS

FAILING = ("SELECT name, price FROM products ORDER BY price DESC, name", "SELECT name, price FROM products ORDER BY price, name")


def _case(expected: str, actual: str, **config: Any) -> CompareRequest:
    return CompareRequest(case_id="j", user_query="Products by price", expected_sql=expected, actual_sql=actual,
                          db="shop", config=EvalConfig(enable_ai_judge=True, **config))


def _mock(answer: dict[str, Any] | str, **options: Any) -> JudgeConfig:
    content = answer if isinstance(answer, str) else json.dumps(answer)
    return JudgeConfig(model="openai/gpt-4o-mini", litellm_params={"mock_response": content}, **options)


def test_disagreement_annotates_but_never_changes_the_deterministic_verdict(sample_dir: Path) -> None:
    report = Evaluator(db_dir=sample_dir, judge=_mock(GOOD)).evaluate(_case(*FAILING))
    assert report.deterministic_verdict == "fail"
    assert report.ai_advisory_verdict == "pass" and report.verdict_consistency_flag is False
    assert any(w.startswith("consistency warning") for w in report.warnings)
    assert set(report.metrics["ai_judge"]) == {
        "intent_adequacy_judgment", "database_scoped_equivalence_judgment", "acceptable_deviation_judgment",
        "short_rationale", "evidence_bullets", "decision_summary", "severity_classification", "confidence",
        "evidence_strength", "ambiguous_case"}
    judge = report.run_metadata["judge"]
    assert judge["model"] == "openai/gpt-4o-mini" and judge["prompt_version"] == PROMPT_VERSION
    assert judge["token_usage"]["total_tokens"] > 0 and judge["latency_ms"] >= 0


def test_agreement_sets_the_consistency_flag(sample_dir: Path) -> None:
    report = Evaluator(db_dir=sample_dir, judge=_mock({**GOOD, "advisory_verdict": "fail"})).evaluate(_case(*FAILING))
    assert (report.ai_advisory_verdict, report.verdict_consistency_flag) == ("fail", True)


@pytest.mark.parametrize("answer", ["not json at all", json.dumps({"confidence": 0.5}),
                                    json.dumps({**GOOD, "confidence": 7})])
def test_invalid_answers_leave_the_judgment_null_with_a_warning(sample_dir: Path, answer: str) -> None:
    plain = Evaluator(db_dir=sample_dir).evaluate(_case(*FAILING))
    report = Evaluator(db_dir=sample_dir, judge=_mock(answer, max_retries=1)).evaluate(_case(*FAILING))
    assert report.ai_advisory_verdict is None and report.metrics["ai_judge"] is None
    assert any("no valid judgment" in w for w in report.warnings)
    assert report.run_metadata["judge"]["attempts"] == 2
    for key in ("deterministic_verdict", "overall_score", "severity", "diagnostic_scores", "explanations"):
        assert getattr(report, key) == getattr(plain, key)


def test_policy_skips(sample_dir: Path) -> None:
    disabled = Evaluator(db_dir=sample_dir, judge=_mock(GOOD)).evaluate(
        _case(*FAILING).model_copy(update={"config": EvalConfig(enable_ai_judge=False)}))
    assert disabled.ai_advisory_verdict is None and "disabled" in disabled.run_metadata["judge"]["skipped"]
    confident = Evaluator(db_dir=sample_dir, judge=_mock(GOOD)).evaluate(_case(FAILING[0], FAILING[0]))
    assert "high confidence" in confident.run_metadata["judge"]["skipped"]


def test_prompt_is_grounded_bounded_and_split_by_verdict(sample_dir: Path) -> None:
    evaluator = Evaluator(db_dir=sample_dir)
    failing = _case("SELECT * FROM order_items", "SELECT * FROM order_items WHERE quantity > 1")
    report = evaluator.evaluate(failing)
    pending = prepare(failing, report, None, None, _mock(GOOD))
    assert pending.prompt is not None and "false negative" in pending.prompt
    from sqlcmp_dagster.engine.execution import ExecutionAdapter

    relation = ExecutionAdapter(str(sample_dir / "shop.sqlite")).execute("SELECT * FROM order_items").relation
    prompt = build_prompt(failing, report, relation, relation, max_rows=3)
    assert f"first 3 of {relation.height} rows; the rest are truncated" in prompt
    assert prompt.count("[") < 60  # three rows of samples, not the table
    assert "filter_error_score" in prompt and report.explanations[0] in prompt
    fix = report.diagnostic_scores["suggested_fix"]
    assert fix["found"] and f"proven by execution on this database, not a guess): transplanting " \
        f"{', '.join(fix['clauses'])} from the expected query gives a query whose results match: {fix['sql']}" in prompt
    passing = _case("SELECT 1", "SELECT 1")
    assert "false positive" in build_prompt(passing, evaluator.evaluate(passing), None, None, 3)


def _http(server: ChatServer, **options: Any) -> JudgeConfig:
    return JudgeConfig(model="openai/local-test", api_base=server.base, api_key="test", **options)


def _failing_cases(count: int) -> list[CompareRequest]:
    return [_case(FAILING[0], f"SELECT name, price FROM products ORDER BY price, name LIMIT {12 - i}")
            .model_copy(update={"case_id": f"j{i}"}) for i in range(count)]


def test_real_http_judgment_retries_a_rate_limit_and_caches(serve: Any, sample_dir: Path, tmp_path: Path) -> None:
    server = serve(lambda n: (429, None, 0.0) if n == 1 else (200, json.dumps(GOOD), 0.0))
    config = _http(server, max_retries=2, cache_dir=str(tmp_path / "cache"))
    report = Evaluator(db_dir=sample_dir, judge=config).evaluate(_case(*FAILING))
    assert report.ai_advisory_verdict == "pass"
    assert report.run_metadata["judge"]["attempts"] == 2 and server.calls == 2
    assert any("RateLimitError" in w for w in report.warnings)
    again = Evaluator(db_dir=sample_dir, judge=config).evaluate(_case(*FAILING))
    assert again.run_metadata["judge"]["cached"] is True and server.calls == 2  # the cache answered


def test_garbage_from_the_server_is_retried_then_null(serve: Any, sample_dir: Path) -> None:
    server = serve(lambda n: (200, "<html>oops</html>", 0.0))
    report = Evaluator(db_dir=sample_dir, judge=_http(server, max_retries=2)).evaluate(_case(*FAILING))
    assert report.ai_advisory_verdict is None and server.calls == 3
    assert report.deterministic_verdict == "fail"


def test_a_hanging_server_times_out_within_the_bound(serve: Any, sample_dir: Path) -> None:
    # The judge's first call in a process imports litellm (seconds on a loaded machine): made before the clock
    # starts, so that the bound times the hanging server whichever tests ran before in this process (under
    # pytest-xdist this may be the first judge test of its worker). Its report is not kept for the case below.
    Evaluator(db_dir=sample_dir, judge=_mock(GOOD)).evaluate(_case(*FAILING))
    forget_reports()
    server = serve(lambda n: (200, json.dumps(GOOD), 5.0))
    started = time.monotonic()
    report = Evaluator(db_dir=sample_dir, judge=_http(server, timeout_s=0.5, max_retries=1)).evaluate(
        _case(*FAILING))
    assert time.monotonic() - started < 4.5
    assert report.ai_advisory_verdict is None and any("Timeout" in w for w in report.warnings)


def test_batch_concurrency_and_token_budget(serve: Any, sample_dir: Path) -> None:
    server = serve(lambda n: (200, json.dumps(GOOD), 0.2))
    reports = Evaluator(db_dir=sample_dir, judge=_http(server, concurrency=2)).evaluate_all(_failing_cases(6))
    assert all(r.ai_advisory_verdict == "pass" for r in reports) and server.max_in_flight <= 2
    budget_server = serve(lambda n: (200, json.dumps(GOOD), 0.0))
    limited = Evaluator(db_dir=sample_dir, judge=_http(budget_server, concurrency=1, max_total_tokens=200))
    reports = limited.evaluate_all(_failing_cases(5))
    assert budget_server.calls == 2  # 120 tokens each: the third call would pass the budget of 200
    assert [r.ai_advisory_verdict for r in reports].count("pass") == 2
    assert sum("budget" in (r.run_metadata["judge"]["skipped"] or "") for r in reports) == 3


def test_budget_and_cache_primitives() -> None:
    budget = Budget(max_tokens=10, max_cost_usd=None)
    assert budget.exhausted() is None
    budget.spend(10, None)
    assert "token budget" in (budget.exhausted() or "")
    assert ResponseCache.key("m", "p") != ResponseCache.key("m2", "p") != ResponseCache.key("m", "p2")


def test_judge_reports_keeps_order_and_reports() -> None:
    report = Report.model_validate_json(json.dumps({
        "case_id": "x", "deterministic_verdict": "fail", "ai_advisory_verdict": None,
        "verdict_consistency_flag": None, "overall_score": 0.3, "structure_score": 0.5, "result_score": 0.4,
        "diagnostic_scores": {"confidence": 0.5}, "performance_scores": None, "severity": "major issue",
        "explanations": ["e"], "mismatch_map": None, "error_types": [], "blocked_reason": None, "warnings": [],
        "validity": {}, "evidence": {}, "run_metadata": {}, "metrics": {"validation": None, "result": None}}))
    request = _case("SELECT 1", "SELECT 2")
    outcomes = judge_reports([prepare(request, report, None, None, _mock(GOOD))] * 3, _mock(GOOD))
    assert [o.judgment.advisory_verdict for o in outcomes if o.judgment] == ["pass"] * 3


def test_an_answer_that_breaks_the_parser_is_its_cases_alone(sample_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """JSON nested past the parser's recursion limit (an answer a prompt-injected case can ask for) raised
    RecursionError, which nothing caught: the batch ended and every report was lost (a review's finding). It is
    that case's invalid answer now; a damaged cache entry is asked again rather than read."""
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    cases = [_case(*FAILING).model_copy(update={"case_id": name}) for name in ("one", "two")]
    reports = Evaluator(db_dir=sample_dir, judge=_mock(deep, max_retries=0)).evaluate_all(cases)
    assert [r.case_id for r in reports] == ["one", "two"]
    assert all(r.ai_advisory_verdict is None and r.deterministic_verdict == "fail" for r in reports)
    assert any("RecursionError" in w for w in reports[0].warnings), reports[0].warnings

    def damaged(self: ResponseCache, key: str) -> None:
        raise json.JSONDecodeError("damaged cache file", "{", 1)

    monkeypatch.setattr(ResponseCache, "get", damaged)
    report = Evaluator(db_dir=sample_dir, judge=_mock(GOOD)).evaluate(_case(*FAILING))
    assert report.ai_advisory_verdict == "pass"


def test_the_api_key_never_reaches_a_report(sample_dir: Path) -> None:
    """A provider or gateway may echo the request's Authorization header in its error; the error's text went
    into the report's warnings as it was (a review's finding)."""
    echo = RuntimeError("401 bad key Bearer sk-SECRET-123 for https://user:pw-SECRET@gw.invalid/v1")
    config = JudgeConfig(model="openai/m", api_key="sk-SECRET-123", api_base="https://user:pw-SECRET@gw.invalid/v1",
                         max_retries=0, litellm_params={"mock_response": echo})
    report = Evaluator(db_dir=sample_dir, judge=config).evaluate(_case(*FAILING))
    assert report.ai_advisory_verdict is None
    assert any("Bearer [redacted] for https://user:[redacted]@gw.invalid/v1" in w for w in report.warnings), \
        report.warnings
    assert "SECRET" not in report.model_dump_json()


class RawServer:
    """A loopback HTTP server whose every POST is answered by ``answer(handler, request_body)``: for what
    ChatServer's well-formed answers cannot do (echo a request header, drip a body); it keeps the request
    bodies, and ``stop`` ends an answer still being written when the test is over."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler, dict[str, Any], threading.Event], None]) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.bodies.append(body)
                try:
                    answer(self, body, server.stop)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def raw_serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(answer: Callable[[BaseHTTPRequestHandler, dict[str, Any], threading.Event], None]) -> RawServer:
        servers.append(RawServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.stop.set()
        server.httpd.shutdown()
        server.httpd.server_close()


def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, length: int | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload) if length is None else length))
    handler.end_headers()
    handler.wfile.write(payload)
    handler.wfile.flush()


def _chat(content: str) -> bytes:
    return json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "local-test",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()


def test_a_key_litellm_reads_from_the_environment_never_reaches_a_report(
        raw_serve: Callable[..., RawServer], sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no key in the config, litellm sends OPENAI_API_KEY; a gateway echoing the Authorization header in
    its 401 put that key into the report's warnings: only the config's key was masked (a review's finding)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ENVSECRET-0123456789")

    def echo(handler: BaseHTTPRequestHandler, body: dict[str, Any], stop: threading.Event) -> None:
        message = f"bad key; you sent Authorization: {handler.headers.get('Authorization', '')}"
        _send(handler, 401, json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode())

    server = raw_serve(echo)
    config = JudgeConfig(model="openai/local-test", api_base=server.base, max_retries=0)
    report = Evaluator(db_dir=sample_dir, judge=config).evaluate(_case(*FAILING))
    assert server.bodies and report.ai_advisory_verdict is None and report.deterministic_verdict == "fail"
    assert any("Authorization: Bearer [redacted]" in w for w in report.warnings), report.warnings
    assert "ENVSECRET" not in report.model_dump_json()


def test_environment_credentials_and_header_values_are_masked_wherever_they_appear(
        sample_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both halves of the masking, apart: a credential variable's value where no header names it, and header
    or bearer values no variable holds (a gateway's own key, a key from a variable of another name). A short
    value (under 8 characters) and a variable not named like a credential are not masked: words stay words."""
    monkeypatch.setenv("MY_GATEWAY_TOKEN", "tok-ENVSECRET-42")
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-ENVSECRET-7")  # the credential word inside the name
    monkeypatch.setenv("WATSONX_APIKEY", "wx-ENVSECRET-8")
    monkeypatch.setenv("SHORT_KEY", "invalid")
    monkeypatch.setenv("SQLCMP_PLAIN_SETTING", "gateway-rejected")
    echo = RuntimeError('token tok-ENVSECRET-42 gateway-rejected: invalid; {"Authorization": "Basic HDRSECRET1=="}'
                        " then Bearer eyJ.BEARERSECRET.x; x-api-key=APIKEYSECRET; bedrock-ENVSECRET-7 wx-ENVSECRET-8")
    config = JudgeConfig(model="openai/m", max_retries=0, litellm_params={"mock_response": echo})
    report = Evaluator(db_dir=sample_dir, judge=config).evaluate(_case(*FAILING))
    warning = next(w for w in report.warnings if w.startswith("judge call 1 failed"))
    assert 'token [redacted] gateway-rejected: invalid; {"Authorization": "Basic [redacted]"} then Bearer ' \
        "[redacted]; x-api-key=[redacted]; [redacted] [redacted]" in warning, warning
    assert "SECRET" not in report.model_dump_json()


def test_a_drip_feeding_server_ends_the_call_within_the_bound(raw_serve: Callable[..., RawServer],
                                                              sample_dir: Path) -> None:
    """Headers, then a byte every 0.2 s: each read succeeds within the per-read timeout, so the call ran until
    the server stopped (forever, in the review: the report was never written). The deadline ends the whole call;
    without it this server holds the call for 45 s."""
    def drip(handler: BaseHTTPRequestHandler, body: dict[str, Any], stop: threading.Event) -> None:
        _send(handler, 200, b"", length=100_000)
        ends = time.monotonic() + 45
        while time.monotonic() < ends and not stop.wait(0.2):
            handler.wfile.write(b" ")
            handler.wfile.flush()

    server = raw_serve(drip)
    started = time.monotonic()
    report = Evaluator(db_dir=sample_dir, judge=JudgeConfig(
        model="openai/local-test", api_base=server.base, api_key="test", timeout_s=1.0, max_retries=0)).evaluate(
        _case(*FAILING))
    assert time.monotonic() - started < 30
    assert server.bodies and report.ai_advisory_verdict is None and report.deterministic_verdict == "fail"
    assert any("ran past its time" in w for w in report.warnings), report.warnings


def test_the_answer_length_is_bounded_and_max_tokens_is_sent(raw_serve: Callable[..., RawServer],
                                                             sample_dir: Path) -> None:
    """An answer of megabytes (one 50 MB evidence bullet, in the review) was accepted whole into the report, and
    nothing asked the model to stop: now ``max_tokens`` is sent and a longer answer is refused unparsed."""
    answers = [json.dumps({**GOOD, "evidence_bullets": ["B" * 1_000_000]}), json.dumps(GOOD)]

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any], stop: threading.Event) -> None:
        _send(handler, 200, _chat(answers[len(server.bodies) - 1]))

    server = raw_serve(answer)
    config = JudgeConfig(model="openai/local-test", api_base=server.base, api_key="test", max_retries=1,
                         max_answer_tokens=1234)
    report = Evaluator(db_dir=sample_dir, judge=config).evaluate(_case(*FAILING))
    assert [body.get("max_tokens") for body in server.bodies] == [1234, 1234]
    assert any(f"more than the {MAX_ANSWER_CHARS} read" in w for w in report.warnings), report.warnings
    assert report.ai_advisory_verdict == "pass" and len(report.model_dump_json()) < 200_000  # the retry's answer


def test_a_long_evidence_bullet_is_cut_with_a_marker(sample_dir: Path) -> None:
    """One wordy bullet keeps the judgment (cut, not refused), and the cut is visible."""
    answer = {**GOOD, "evidence_bullets": ["x" * 5_000, "ordering_error_flag"]}
    report = Evaluator(db_dir=sample_dir, judge=_mock(answer)).evaluate(_case(*FAILING))
    first, second = report.metrics["ai_judge"]["evidence_bullets"]
    assert first == "x" * MAX_BULLET_CHARS + f" [cut: the first {MAX_BULLET_CHARS} of 5000 characters shown]"
    assert second == "ordering_error_flag" and report.ai_advisory_verdict == "pass"


def test_the_prompt_parts_from_the_case_are_bounded(sample_dir: Path) -> None:
    """A megabyte question, query and context, and a wide result (each cell is cut already, not the row), made a
    prompt of megabytes; each part is cut, and the cut stated."""
    from sqlcmp_dagster.engine.execution import ExecutionAdapter

    case = _case(*FAILING)
    report = Evaluator(db_dir=sample_dir).evaluate(case)
    huge = case.model_copy(update={"user_query": "q" * 1_000_000, "actual_sql": "SELECT 1 -- " + "s" * 1_000_000,
                                   "context": {"notes": "c" * 1_000_000}})
    columns = ", ".join(f"hex(zeroblob(90)) AS c{i}" for i in range(500))
    relation = ExecutionAdapter(str(sample_dir / "shop.sqlite")).execute(
        f"SELECT {columns} FROM products").relation
    prompt = build_prompt(huge, report, relation, relation, max_rows=10)
    assert len(prompt) <= PROMPT_BOUND_CHARS < 200_000, len(prompt)
    assert prompt.count(" [cut: the first ") == 5  # question, actual SQL, context, both samples
    assert "User question: qqq" in prompt and "Actual SQL: SELECT 1 -- sss" in prompt
