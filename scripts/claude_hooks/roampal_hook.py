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
and exits 0 without injecting anything."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

TIMEOUT = float(os.environ.get("MEMPROJ_HOOK_TIMEOUT", "10"))
TRANSCRIPT_TAIL = 100_000  # characters of the transcript sent with an exchange


def post(path: str, payload: dict[str, Any]) -> dict[str, Any]:
    base = os.environ.get("MEMPROJ_URL", "http://127.0.0.1:8000").rstrip("/")
    request = urllib.request.Request(  # noqa: S310 - the user's own memproj URL
        base + path,
        data=json.dumps(payload).encode("utf-8"),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer " + os.environ.get("MEMPROJ_TOKEN", ""),
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
        return json.loads(response.read().decode("utf-8"))


def _text(content: Any) -> str:
    """The text of a transcript message: a string, or its text blocks (tool calls and results skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text").strip()
    return ""


def last_exchange(transcript_path: str) -> tuple[str, str, str]:
    """(last user prompt, the assistant's text after it, the transcript's tail) from Claude Code's JSONL."""
    user, assistant, raw = "", [], ""
    try:
        with open(transcript_path, encoding="utf-8") as handle:
            raw = handle.read()
    except OSError:
        return "", "", ""
    for line in raw.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") or {}
        kind = entry.get("type") or message.get("role")
        said = _text(message.get("content"))
        if kind == "user" and said:
            user, assistant = said, []
        elif kind == "assistant" and said:
            assistant.append(said)
    return user, "\n\n".join(assistant), raw[-TRANSCRIPT_TAIL:]


def user_prompt_submit(event: dict[str, Any]) -> int:
    answer = post(
        "/api/hooks/get-context",
        {"query": str(event.get("prompt", ""))[:2000], "conversation_id": str(event.get("session_id", ""))[:200]},
    )
    injection = answer.get("formatted_injection") or ""
    if injection:
        print(injection)  # UserPromptSubmit: stdout becomes context for the prompt
    return 0


def stop(event: dict[str, Any]) -> int:
    if event.get("stop_hook_active"):
        return 0  # Claude is continuing because of our block: the exchange is already recorded
    user, assistant, transcript = last_exchange(str(event.get("transcript_path", "")))
    if not assistant:
        return 0
    answer = post(
        "/api/hooks/stop",
        {
            "conversation_id": str(event.get("session_id", "default"))[:200] or "default",
            "user_message": user[:100_000],
            "assistant_response": assistant[:200_000],
            "transcript": transcript,
        },
    )
    if answer.get("should_block"):
        print(json.dumps({"decision": "block", "reason": answer.get("block_message", "")}))
    return 0


def refusal(exc: urllib.error.HTTPError) -> str:
    """What memproj answered instead, in one line: the message of its coded JSON body."""
    try:
        body = json.loads(exc.read().decode("utf-8"))
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
