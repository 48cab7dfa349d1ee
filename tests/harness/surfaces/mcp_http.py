"""MCP over streamable HTTP as a plain JSON-RPC client: one ``tools/call`` per
POST (the endpoints are stateless and answer JSON)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any

from tests.harness.surfaces.answers import ERROR_CODE_META_KEY, Answer, error_code


async def mcp_call(
    http: Any, url: str, token: str, name: str, arguments: dict[str, Any], *, idempotency_key: str = ""
) -> Answer:
    """One tools/call over streamable HTTP (stateless JSON responses)."""
    import httpx

    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if idempotency_key:
        params["_meta"] = {"idempotency_key": idempotency_key}
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "tools/call", "params": params}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    started = time.perf_counter()
    try:
        response = await http.post(url, json=body, headers=headers)
    except httpx.TimeoutException:
        return Answer("hang", "timeout", seconds=time.perf_counter() - started)
    except httpx.HTTPError as exc:
        return Answer("exception", f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        text = f"HTTP {response.status_code}: {response.text[:300]}"
        code = None
        with contextlib.suppress(ValueError):
            payload = response.json()
            code = error_code(json.dumps(payload), payload)
        return Answer("error", text, code, None, seconds)
    try:
        payload = response.json()
    except ValueError:
        return Answer("error", f"not JSON: {response.text[:300]}", None, None, seconds)
    if "error" in payload:
        return Answer("error", json.dumps(payload["error"]), str(payload["error"].get("code")), payload, seconds)
    result = payload.get("result", {})
    text = " ".join(block.get("text", "") for block in result.get("content", []))
    if result.get("isError"):
        core = (result.get("_meta") or {}).get(ERROR_CODE_META_KEY)
        return Answer("error", text, error_code(text) or core, None, seconds, core)
    return Answer("ok", text, None, result.get("structuredContent"), seconds)


MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}


async def post_tool_call(http, url: str, body: dict, errors: list[str]) -> bool:  # type: ignore[no-untyped-def]
    """POST one tool call; False (and the error noted) unless it answered without an error."""
    return await _answered(http, url, body, errors, lambda payload: bool(payload["result"].get("isError")))


async def post_api_call(http, url: str, arguments: dict, errors: list[str]) -> bool:  # type: ignore[no-untyped-def]
    """POST one call of the plain HTTP API; False (and the error noted) unless it answered 200 without an error."""
    return await _answered(http, url, arguments, errors, lambda _payload: False)


async def _answered(http, url: str, body: dict, errors: list[str], failed) -> bool:  # type: ignore[no-untyped-def]
    try:
        response = await http.post(url, json=body)
        payload = response.json()
        if response.status_code != 200 or "error" in payload or failed(payload):
            errors.append(f"{response.status_code} {str(payload)[:200]}")
            return False
    except Exception as exc:  # noqa: BLE001 - counted as an error of the run
        errors.append(f"{type(exc).__name__}: {exc}")
        return False
    return True
