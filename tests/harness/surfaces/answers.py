"""How an answer is judged, whatever surface it came from: its outcome, the
dialect's error code in any of the shapes the dialects use, and text that only
an internal failure produces."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Text that only an internal failure produces; never for a client's eyes.
INTERNAL_DETAIL = re.compile(
    r"Traceback \(most recent|File \"|validation errors? for |input_value=|errors\.pydantic\.dev|"
    r"psycopg|django\.|site-packages|IntegrityError|OperationalError|DataError|"
    r"UnicodeEncodeError|ValueError\(|KeyError|TypeError",
)
TOOL_PREFIX = re.compile(r"^Error executing tool [^:]*(: )?")
_CODE_PATTERNS = (
    re.compile(r"^\[([A-Z][A-Z0-9_]{2,})\]"),
    re.compile(r"^([A-Z][A-Z0-9_]{2,})(?::|\s[-\u2014]\s|\s*$)"),
    re.compile(r'"code"\s*:\s*"?([A-Za-z0-9_.-]+)"?'),
    # langmem speaks Python's vocabulary, as LangMem raises: `ValueError: ...`, `ConfigurationError: ...`.
    re.compile(r"^([A-Z][A-Za-z]+(?:Error|Exception)):\s"),
)


@dataclass
class Answer:
    outcome: str  # ok | error | hang | exception
    text: str = ""
    code: str | None = None
    structured: Any = None
    seconds: float = 0.0
    # The core code behind a tool error (its result _meta), whatever the dialect's text calls it.
    core_code: str | None = None

    @property
    def internal_detail(self) -> bool:
        return bool(INTERNAL_DETAIL.search(self.text))


# A tool error's result _meta key for the core code behind the dialect's text
# (mcp_server.dialect.ERROR_CODE_META_KEY; spelled out so the bench needs no Django).
ERROR_CODE_META_KEY = "io.memproj/error-code"
# What Django's security and clickjacking middleware put on an answer, as the
# settings configure them (memproj.edge.SecurityHeaders adds them where Django did not run).
SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}


def error_code(text: str, structured: Any = None) -> str | None:
    """The dialect's error code in an error answer, in any of the shapes the
    dialects use: ``[CODE] message``, ``CODE: message``, or a JSON body with
    ``code`` / ``error.code`` (in the text or, for an HTTP body, the parsed body)."""
    if isinstance(structured, dict):
        err = structured.get("error", structured)
        if isinstance(err, dict) and err.get("code"):
            return str(err["code"])
    body = TOOL_PREFIX.sub("", text.strip(), count=1).strip()
    for pattern in _CODE_PATTERNS:
        found = pattern.search(body)
        if found:
            return found.group(1)
    return None


def answer_from_result(result: Any, seconds: float) -> Answer:
    text = " ".join(getattr(block, "text", "") or "" for block in result.content)
    if result.is_error:
        # An error result carries no structured content: the code is the one in
        # the dialect's text, else (roampal's `Error: ...` names none) the core
        # code in the result's _meta.
        core = (result.meta or {}).get(ERROR_CODE_META_KEY)
        return Answer("error", text, error_code(text) or core, result.structured_content, seconds, core)
    return Answer("ok", text, None, result.structured_content, seconds)


def answer_text(answer: Answer) -> str:
    return answer.text + " " + json.dumps(answer.structured, default=str, ensure_ascii=False)
