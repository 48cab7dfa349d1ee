#!/usr/bin/env python3
"""Claude Code hooks for memproj's roampal dialect (roampal v0.3.5's). Standard library
only, so it runs with any python3, outside the service's virtualenv.

    roampal_hook.py user-prompt-submit   # UserPromptSubmit: prints the KNOWN CONTEXT injection
    roampal_hook.py stop                 # Stop: records the exchange, asks for scoring if it is owed

Claude Code writes the hook's JSON on stdin (session_id, transcript_path, cwd,
hook_event_name, prompt / stop_hook_active). Configuration from the environment:
MEMPROJ_URL (default http://127.0.0.1:8000) and MEMPROJ_TOKEN (a memproj API
token). A hook never breaks the user's session: on any failure it prints a note
on stderr (memproj unreachable, the token refused, or memproj's own reason)
and exits 0 without injecting anything. The exchange it records is sent as
UTF-8 within the route's 2 MiB body limit (the transcript's tail gives way
first), with a NUL dropped and a lone surrogate made U+FFFD, which memproj
would refuse."""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections import deque
from typing import Any

DEFAULT_TIMEOUT = 10.0
TRANSCRIPT_TAIL = 100_000  # characters of the transcript sent with an exchange
# memproj's hook routes take a body of at most 2 MiB; the payload is kept under
# it with room for the JSON around the texts.
BODY_LIMIT = 2 * 1024 * 1024 - 4096
ANSWER_LIMIT = 4 * 1024 * 1024  # bytes of an answer read; memproj's are far smaller
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class UnexpectedAnswer(ValueError):
    """The server at MEMPROJ_URL answered something that is not memproj's JSON object."""


def timeout() -> float:
    """MEMPROJ_HOOK_TIMEOUT in seconds; a value that is no positive number is
    said on stderr and the default used (the hook must not fail the session)."""
    raw = os.environ.get("MEMPROJ_HOOK_TIMEOUT", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        print(f"roampal hook: MEMPROJ_HOOK_TIMEOUT={raw!r} is no number of seconds; using 10.", file=sys.stderr)
        return DEFAULT_TIMEOUT
    return value


def storable(text: str) -> str:
    """Text memproj stores: it refuses a NUL and a lone surrogate (which a
    transcript's JSON escapes can hold) in the whole body, so one such
    character would lose the exchange. A NUL is dropped, a lone surrogate
    becomes U+FFFD."""
    return LONE_SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def encoded(payload: dict[str, Any]) -> bytes:
    # UTF-8 as it is: ensure_ascii's \uXXXX escapes take 6 bytes (12 for an
    # emoji) per character, so an exchange in Chinese or Greek within every
    # field's limit came to more than the body limit and was refused whole.
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def post(path: str, payload: dict[str, Any]) -> dict[str, Any]:
    base = os.environ.get("MEMPROJ_URL", "http://127.0.0.1:8000").rstrip("/")
    request = urllib.request.Request(  # noqa: S310 - the user's own memproj URL
        base + path,
        data=encoded(payload),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer " + os.environ.get("MEMPROJ_TOKEN", ""),
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout()) as response:  # noqa: S310
        answer = json.loads(response.read(ANSWER_LIMIT + 1)[:ANSWER_LIMIT].decode("utf-8"))
    if not isinstance(answer, dict):
        raise UnexpectedAnswer(f"{base}{path} answered JSON that is not an object; is MEMPROJ_URL memproj?")
    return answer


def _text(content: Any) -> str:
    """The text of a transcript message: a string, or its text blocks (tool calls and results skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text").strip()
    return ""


def last_exchange(transcript_path: str) -> tuple[str, str, str]:
    """(last user prompt, the assistant's text after it, the transcript's tail) from Claude Code's JSONL.
    Read a line at a time (a long session's transcript is not held whole); a
    byte that is not UTF-8 is read as U+FFFD, not a reason to record nothing."""
    user, assistant = "", list[str]()
    tail: deque[str] = deque()
    kept = 0
    try:
        with open(transcript_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                tail.append(line)
                kept += len(line)
                while kept - len(tail[0]) >= TRANSCRIPT_TAIL:
                    kept -= len(tail.popleft())
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(entry, dict):
                    continue
                message = entry.get("message")
                message = message if isinstance(message, dict) else {}
                kind = entry.get("type") or message.get("role")
                said = _text(message.get("content"))
                if kind == "user" and said:
                    user, assistant = said, []
                elif kind == "assistant" and said:
                    assistant.append(said)
    except OSError:
        return "", "", ""
    return user, "\n\n".join(assistant), "".join(tail)[-TRANSCRIPT_TAIL:]


def _json_bytes(char: str) -> int:
    return len(json.dumps(char, ensure_ascii=False).encode("utf-8")) - 2


def _shortened(text: str, excess: int, *, keep_end: bool) -> str:
    """``text`` less as many characters as take at least ``excess`` bytes of
    JSON, cut from its start (``keep_end``) or its end."""
    dropped = 0
    order = range(len(text)) if keep_end else range(len(text) - 1, -1, -1)
    for count, index in enumerate(order, 1):
        dropped += _json_bytes(text[index])
        if dropped >= excess:
            return text[count:] if keep_end else text[: len(text) - count]
    return ""


def stop_payload(conversation_id: str, user: str, assistant: str, transcript: str) -> dict[str, Any]:
    """The Stop hook's body, storable and within the body limit: the
    transcript's tail gives way first, then the user's prompt and then the
    answer are cut (each already within its own field's limit)."""
    payload = {
        "conversation_id": storable(conversation_id)[:200] or "default",
        "user_message": storable(user)[:100_000],
        "assistant_response": storable(assistant)[:200_000],
        "transcript": storable(transcript)[-TRANSCRIPT_TAIL:],
    }
    for field in ("transcript", "user_message", "assistant_response"):
        excess = len(encoded(payload)) - BODY_LIMIT
        if excess <= 0:
            break
        payload[field] = _shortened(payload[field], excess, keep_end=field == "transcript")
    return payload


def user_prompt_submit(event: dict[str, Any]) -> int:
    answer = post(
        "/api/hooks/get-context",
        {
            "query": storable(str(event.get("prompt", "")))[:2000],
            "conversation_id": storable(str(event.get("session_id", "")))[:200],
        },
    )
    injection = answer.get("formatted_injection") or ""
    if isinstance(injection, str) and injection:
        print(injection)  # UserPromptSubmit: stdout becomes context for the prompt
    return 0


def stop(event: dict[str, Any]) -> int:
    if event.get("stop_hook_active"):
        return 0  # Claude is continuing because of our block: the exchange is already recorded
    user, assistant, transcript = last_exchange(str(event.get("transcript_path", "")))
    if not assistant:
        return 0
    answer = post("/api/hooks/stop", stop_payload(str(event.get("session_id", "default")), user, assistant, transcript))
    if answer.get("should_block"):
        print(json.dumps({"decision": "block", "reason": answer.get("block_message", "")}))
    return 0


def refusal(exc: urllib.error.HTTPError) -> str:
    """What memproj answered instead, in one line: the message of its coded JSON body."""
    try:
        body = json.loads(exc.read(ANSWER_LIMIT).decode("utf-8"))
    except (OSError, ValueError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    reason = f": {message}" if isinstance(message, str) and message else ""
    if exc.code == 401 and not os.environ.get("MEMPROJ_TOKEN"):
        return "MEMPROJ_TOKEN is not set; memproj needs an API token" + reason
    if exc.code == 401:
        return "memproj refused the token in MEMPROJ_TOKEN" + reason
    return f"memproj answered HTTP {exc.code}" + reason


def main(argv: list[str]) -> int:
    commands = {"user-prompt-submit": user_prompt_submit, "stop": stop}
    if len(argv) != 2 or argv[1] not in commands:
        print(f"usage: {argv[0]} {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    try:
        event = json.load(sys.stdin)
        return commands[argv[1]](event if isinstance(event, dict) else {})
    except urllib.error.HTTPError as exc:  # memproj answered, with a reason
        print(f"roampal hook: {refusal(exc)}; continuing without memory.", file=sys.stderr)
        return 0
    except (OSError, ValueError, urllib.error.URLError) as exc:
        print(f"roampal hook: memproj unavailable ({exc}); continuing without memory.", file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
