"""Consolidation by an LLM over the OpenAI-compatible chat-completions API
(OpenAI, Ollama, vLLM, llama.cpp server: anything serving
``POST {base}/chat/completions``).

The answer is constrained with ``response_format: json_schema`` where the
server supports it, and checked against the same schema here in any case
(many local servers ignore the constraint). A malformed answer is sent back
with the validation error for another try, up to MEMPROJ_LLM_MAX_ATTEMPTS;
after that, or on a timeout or server error, ``ConsolidatorUnavailable`` leaves
the episodes for a later run."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import datetime
from typing import Any

import httpx
import jsonschema
from django.conf import settings

from memory import scoring
from memory.consolidators.base import ConsolidatorUnavailable, EpisodeView, Plan, Proposal

logger = logging.getLogger(__name__)

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["memories", "duplicates"],
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["kind", "content", "subject", "predicate", "permanence", "importance", "source_ids"],
                "properties": {
                    "kind": {"type": "string", "enum": ["fact", "rule"]},
                    "content": {"type": "string", "minLength": 1, "maxLength": 4000},
                    "subject": {"type": "string", "maxLength": 200},
                    "predicate": {"type": "string", "maxLength": 200},
                    "permanence": {"type": "string", "enum": list(scoring.DECAY_RATES)},
                    "importance": {"type": "number", "minimum": 0, "maximum": 10},
                    "source_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                },
            },
        },
        "duplicates": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        },
    },
}

# Strict structured-output modes accept only a subset of JSON Schema (OpenAI's
# strict mode rejects some bounds keywords, local servers vary); the server gets
# the shape, and the bounds are checked here against RESPONSE_SCHEMA.
_BOUNDS = {"minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems"}


def _shape_only(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _shape_only(v) for k, v in schema.items() if k not in _BOUNDS}
    if isinstance(schema, list):
        return [_shape_only(v) for v in schema]
    return schema


REQUEST_SCHEMA = _shape_only(RESPONSE_SCHEMA)

SYSTEM_PROMPT = """You consolidate an AI agent's episodic memories into durable long-term memories.
You receive episodes (things that happened or were said), each with an id.
Return JSON only, matching the schema:
- "memories": durable knowledge supported by the episodes. Use kind "fact" for a statement about the
  world or the user, with a short "subject" (who or what it is about) and "predicate" (which attribute:
  e.g. subject "user", predicate "preferred editor"); use kind "rule" for guidance on how the agent should
  act (subject and predicate empty strings). "content" is one self-contained sentence. "permanence" is one of
  permanent, stable, standard, volatile, ephemeral. "importance" is 0-10. "source_ids" lists the ids of the
  episodes that support it. Only propose what recurs or is clearly stated; an empty list is fine.
- "duplicates": groups of episode ids that say the same thing (oldest first).
Never invent ids."""


class MalformedAnswer(ValueError):
    pass


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


class LLMConsolidator:
    name = "llm"
    needs_embeddings = False

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 60.0,
        max_attempts: int = 3,
    ) -> None:
        if not base_url:
            raise ValueError("the LLM consolidator needs MEMPROJ_LLM_BASE_URL (e.g. http://127.0.0.1:11434/v1)")
        self.model = model
        self.max_attempts = max(1, max_attempts)
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
        )

    @classmethod
    def from_settings(cls) -> LLMConsolidator:
        return cls(
            base_url=settings.MEMPROJ_LLM_BASE_URL,
            model=settings.MEMPROJ_LLM_MODEL,
            api_key=settings.MEMPROJ_LLM_API_KEY,
            timeout=settings.MEMPROJ_LLM_TIMEOUT,
            max_attempts=settings.MEMPROJ_LLM_MAX_ATTEMPTS,
        )

    def close(self) -> None:
        self._client.close()

    def _complete(self, messages: list[dict[str, str]]) -> str:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "consolidation", "strict": True, "schema": REQUEST_SCHEMA},
            },
        }
        try:
            response = self._client.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise ConsolidatorUnavailable(f"LLM did not answer in time: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise ConsolidatorUnavailable(f"LLM server unreachable: {exc!r}") from exc
        if response.status_code >= 400:
            raise ConsolidatorUnavailable(f"LLM server answered {response.status_code}: {response.text[:500]}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ConsolidatorUnavailable(f"not a chat-completions response: {response.text[:500]}") from exc
        if not isinstance(content, str):
            raise ConsolidatorUnavailable("chat-completions response without text content")
        return content

    @staticmethod
    def _parse(content: str, episode_ids: set[str]) -> dict[str, Any]:
        fenced = _FENCE.match(content)
        try:
            data = json.loads(fenced.group(1) if fenced else content)
        except json.JSONDecodeError as exc:
            raise MalformedAnswer(f"the answer is not valid JSON ({exc})") from exc
        try:
            jsonschema.validate(data, RESPONSE_SCHEMA)
        except jsonschema.ValidationError as exc:
            raise MalformedAnswer(f"the answer does not match the schema: {exc.message}") from exc
        for item in data["memories"]:
            unknown = set(item["source_ids"]) - episode_ids
            if unknown:
                raise MalformedAnswer(f"source_ids {sorted(unknown)} are not ids of the given episodes")
            if item["kind"] == "fact" and not (item["subject"].strip() and item["predicate"].strip()):
                raise MalformedAnswer("every fact needs a non-empty subject and predicate")
        for group in data["duplicates"]:
            unknown = set(group) - episode_ids
            if unknown:
                raise MalformedAnswer(f"duplicate ids {sorted(unknown)} are not ids of the given episodes")
        return data

    def plan(self, episodes: list[EpisodeView], *, now: datetime) -> Plan:
        if not episodes:
            return Plan()
        listing = [
            {"id": str(e.id), "created_at": e.created_at.isoformat(), "butler": e.butler, "content": e.content}
            for e in episodes
        ]
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps({"episodes": listing}, ensure_ascii=False)},
        ]
        ids = {item["id"] for item in listing}
        last_error = ""
        for attempt in range(1, self.max_attempts + 1):
            content = self._complete(messages)
            try:
                data = self._parse(content, ids)
            except MalformedAnswer as exc:
                last_error = str(exc)
                logger.info("LLM consolidation attempt %d malformed: %s", attempt, last_error)
                messages += [
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": f"That answer was invalid: {last_error}. Answer again with JSON only."},
                ]
                continue
            return Plan(
                proposals=[
                    Proposal(
                        kind=item["kind"],
                        content=item["content"].strip(),
                        source_ids=tuple(uuid.UUID(i) for i in dict.fromkeys(item["source_ids"])),
                        subject=item["subject"].strip() if item["kind"] == "fact" else "",
                        predicate=item["predicate"].strip() if item["kind"] == "fact" else "",
                        permanence=item["permanence"],
                        importance=float(item["importance"]),
                    )
                    for item in data["memories"]
                ],
                duplicates=[tuple(uuid.UUID(i) for i in dict.fromkeys(group)) for group in data["duplicates"]],
                consumed={e.id for e in episodes},
            )
        raise ConsolidatorUnavailable(f"LLM answered malformed output {self.max_attempts} times; last: {last_error}")
