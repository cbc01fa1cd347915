"""An LLM judge decides whether the model's final answer equals the row's ``expected_answer``.

The judge is any OpenAI-compatible endpoint (``judge_api``: ``responses`` → ``POST {judge_base_url}/responses``,
or ``chat_completions`` → ``POST {judge_base_url}/chat/completions``), prompted with the question, the expected
answer and the generated one from a template, and answering with ``judge_equal_label`` or
``judge_not_equal_label`` (the first of them in its reply counts; neither counts as not equal). With
``check_twice_swap`` an equal verdict is checked again with the two answers swapped, and a disagreement scores
``reward_if_swap_fails``. Calls to the judge are bounded by ``judge_max_concurrency``; a judge that fails
(unreachable, timing out, HTTP error after retries, an unreadable reply) raises ``JudgeError``, which the core
turns into reward 0.0, masked, with ``failure_kind: judge_failed``; that body still carries ``expected_answer``,
``generated_answer`` and the ``judge_evaluations`` made before the failure, as ``JudgeVerifyResponse`` declares.
"""

from __future__ import annotations

import asyncio
import os
import re
import string
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from ngym import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    JudgeError,
    SimpleResourcesServer,
)
from ngym.errors import ConfigError
from ngym.server.protocol import InputMessage

HERE = Path(__file__).resolve().parent
_RETRYABLE = {408, 409, 429, 500, 502, 503, 504}
#: the placeholders a judge prompt template may use
PLACEHOLDERS = ("question", "expected_answer", "generated_answer", "equal_label", "not_equal_label")


def check_template(template: str) -> str:
    """``template`` unchanged if it uses only ``PLACEHOLDERS`` (``{{``/``}}`` for literal braces); else ValueError."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"judge prompt template is not a valid format string: {exc}") from None
    unknown = sorted(name for name in fields if name not in PLACEHOLDERS)
    if unknown:
        raise ValueError(
            f"judge prompt template uses unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"known: {', '.join('{' + n + '}' for n in PLACEHOLDERS)} (write {{{{ }}}} for literal braces)"
        )
    return template


def read_template_file(fpath: str) -> str:
    """A template file's text (a relative path is relative to the package); ValueError naming the trouble."""
    path = Path(fpath)
    path = path if path.is_absolute() else HERE / path
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return check_template(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


class EquivalenceLLMJudgeConfig(BaseResourcesServerConfig):
    judge_base_url: str = "http://127.0.0.1:8010/v1"
    judge_model: str = "judge"
    judge_api: Literal["responses", "chat_completions"] = "responses"
    judge_api_key_env: str | None = None
    judge_create_params: dict[str, Any] = Field(default_factory=dict)  # temperature, max_output_tokens, ...
    judge_system_message: str | None = None
    judge_prompt_template: str | None = None  # inline; placeholders {question} {expected_answer} {generated_answer}
    judge_prompt_template_fpath: str = Field(  # relative to the package
        default="prompt_templates/equivalence_llm_judge.txt", validate_default=True
    )
    judge_equal_label: str = "[[A=B]]"
    judge_not_equal_label: str = "[[A!=B]]"
    judge_max_concurrency: int | None = 64
    judge_timeout_seconds: float = 60.0
    judge_max_retries: int = 2
    check_twice_swap: bool = False
    reward_if_swap_fails: float = 0.0
    response_extract_regex: str | None = None  # the last match (first non-empty group) is the generated answer

    @field_validator("judge_prompt_template")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        return check_template(value) if value is not None else None

    @field_validator("judge_prompt_template_fpath")
    @classmethod
    def _template_file_readable(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("judge_prompt_template") is None:  # a bad file is a config error, not a 500 per verify
            read_template_file(value)
        return value

    def template_text(self) -> str:
        """The prompt template: ``judge_prompt_template`` inline, else the file (relative to the package)."""
        if self.judge_prompt_template is not None:
            return self.judge_prompt_template
        return read_template_file(self.judge_prompt_template_fpath)

    @field_validator("response_extract_regex")
    @classmethod
    def _extract_regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class JudgeVerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow")

    question: str | None = None
    expected_answer: str

    @field_validator("expected_answer", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value


class JudgeVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")

    expected_answer: str
    generated_answer: str
    judge_evaluations: list[dict[str, Any]]


class EquivalenceLLMJudgeServer(SimpleResourcesServer):
    """Knowledge QA graded by an LLM judge: reward 1.0 when the judge says the answers are equivalent."""

    config: EquivalenceLLMJudgeConfig
    domain = Domain.KNOWLEDGE
    reverify_mode = "stateless"

    _http: httpx.AsyncClient | None = None
    _limit: asyncio.Semaphore | None = None
    _template: str = ""

    async def on_startup(self) -> None:
        cfg = self.config
        headers = {}
        if cfg.judge_api_key_env:
            key = os.environ.get(cfg.judge_api_key_env)
            if not key:
                raise ConfigError(f"judge_api_key_env: environment variable {cfg.judge_api_key_env} is not set")
            headers["authorization"] = f"Bearer {key}"
        self._http = httpx.AsyncClient(timeout=cfg.judge_timeout_seconds, headers=headers)
        self._limit = asyncio.Semaphore(cfg.judge_max_concurrency) if cfg.judge_max_concurrency else None
        try:
            self._template = cfg.template_text().strip()
        except ValueError as exc:  # the file changed since the config was read
            raise ConfigError(str(exc)) from None

    async def on_shutdown(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def verify(self, body: JudgeVerifyRequest) -> JudgeVerifyResponse:
        cfg = self.config
        question = body.question if body.question is not None else _last_user_text(body)
        generated = _extract(body.response.final_text().strip(), cfg.response_extract_regex)
        expected = body.expected_answer
        evaluations: list[dict[str, Any]] = []
        try:
            equal, first = await self._judge(question, expected, generated, "first")
            evaluations.append(first)
            reward = 1.0 if equal else 0.0
            if equal and cfg.check_twice_swap:
                swapped_equal, second = await self._judge(question, generated, expected, "swapped")
                evaluations.append(second)
                reward = 1.0 if swapped_equal else cfg.reward_if_swap_fails
        except JudgeError as exc:
            # The failure body is still a JudgeVerifyResponse: its required fields travel with the error.
            exc.fields.update(expected_answer=expected, generated_answer=generated, judge_evaluations=evaluations)
            raise
        payload = body.model_dump()
        for key in ("expected_answer", "reward", "generated_answer", "judge_evaluations"):
            payload.pop(key, None)
        return JudgeVerifyResponse(
            **payload,
            reward=reward,
            expected_answer=expected,
            generated_answer=generated,
            judge_evaluations=evaluations,
        )

    async def _judge(self, question: str, first: str, second: str, which: str) -> tuple[bool, dict[str, Any]]:
        cfg = self.config
        prompt = self._template.format(
            question=question,
            expected_answer=first,
            generated_answer=second,
            equal_label=cfg.judge_equal_label,
            not_equal_label=cfg.judge_not_equal_label,
        )
        messages = [{"role": "system", "content": cfg.judge_system_message}] if cfg.judge_system_message else []
        messages.append({"role": "user", "content": prompt})
        if cfg.judge_api == "responses":
            path, request = "/responses", {**cfg.judge_create_params, "model": cfg.judge_model, "input": messages}
        else:
            path, request = (
                "/chat/completions",
                {**cfg.judge_create_params, "model": cfg.judge_model, "messages": messages},
            )
        answer = await self._post(path, request)
        text = _reply_text(answer, cfg.judge_api)
        verdict = _verdict(text, cfg.judge_equal_label, cfg.judge_not_equal_label)
        return verdict == cfg.judge_equal_label, {"pass": which, "verdict": verdict, "judge_text": text}

    async def _post(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        assert self._http is not None, "the server has not started"
        url = self.config.judge_base_url.rstrip("/") + path
        attempts = self.config.judge_max_retries + 1
        problem = ""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(0.25 * 2**attempt, 4.0))
            try:
                if self._limit is not None:
                    async with self._limit:
                        response = await self._http.post(url, json=request)
                else:
                    response = await self._http.post(url, json=request)
            except httpx.TimeoutException:
                problem = f"judge at {url} timed out after {self.config.judge_timeout_seconds}s"
                continue
            except httpx.TransportError as exc:
                problem = f"cannot reach the judge at {url}: {exc!r}"
                continue
            if response.status_code in _RETRYABLE:
                problem = f"judge at {url} answered HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code >= 400:
                raise JudgeError(f"judge at {url} answered HTTP {response.status_code}: {response.text[:200]}")
            try:
                answer = response.json()
            except ValueError:
                raise JudgeError(f"judge at {url} answered something that is not JSON: {response.text[:200]}") from None
            if not isinstance(answer, dict):
                raise JudgeError(f"judge at {url} answered JSON that is not an object: {response.text[:200]}")
            return answer
        raise JudgeError(f"{problem} (after {attempts} attempt{'s' if attempts > 1 else ''})")


def _last_user_text(body: JudgeVerifyRequest) -> str:
    items = body.responses_create_params.input
    if isinstance(items, str):
        return items
    for item in reversed(items):
        if isinstance(item, InputMessage) and item.role == "user":
            content = item.content
            return (
                content
                if isinstance(content, str)
                else "".join(p.get("text", "") for p in content if isinstance(p, dict))
            )
    return ""


def _extract(text: str, pattern: str | None) -> str:
    if not pattern:
        return text
    matches = list(re.finditer(pattern, text, flags=re.MULTILINE | re.DOTALL))
    if not matches:
        return text
    last = matches[-1]
    return next((g.strip() for g in last.groups() if g and g.strip()), last.group(0).strip())


def _reply_text(answer: dict[str, Any], api: str) -> str:
    """The judge's reply text; an answer of the wrong shape is a judge failure."""
    try:
        if api == "chat_completions":
            return str(answer["choices"][0]["message"]["content"] or "")
        messages = [item for item in answer["output"] if item.get("type") == "message"]
        if not messages:
            return ""
        return "".join(part.get("text", "") for part in messages[-1]["content"] if part.get("type") == "output_text")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise JudgeError(f"the judge's answer has no readable text ({exc!r}): {str(answer)[:200]}") from None


def _verdict(text: str, equal: str, not_equal: str) -> str | None:
    """The label that appears first in ``text`` (None when neither does)."""
    positions = {label: text.find(label) for label in (equal, not_equal) if text.find(label) >= 0}
    return min(positions, key=positions.__getitem__) if positions else None


if __name__ == "__main__":
    EquivalenceLLMJudgeServer.run_webserver()
