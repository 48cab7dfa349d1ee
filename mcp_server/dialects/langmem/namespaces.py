"""LangMem's namespace rules (LangMem 0.0.30), shared by the `langmem` MCP dialect and
the Python client API. Pure Python: no Django, no LangChain, so both sides
import it.

- A template is a tuple of elements; an element written ``{key}`` is replaced
  by ``configurable[key]`` at run time (LangGraph's runnable config).
- Without a template, the runtime config decides: ``{"org_id", "agent_id"}``
  resolves to ``("org", org_id, agent_id)`` and ``{"user_id"}`` to
  ``("user", user_id)`` (memproj's addition, not LangMem's; when both are present the org/agent pair,
  the more specific partition, wins).
- A missing key raises ``ConfigurationError`` with upstream's message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ACTIONS = ("create", "update", "delete")
RESPONSE_FORMATS = ("content", "content_and_artifact")
# langmem 0.0.30's default instructions for manage_memory.
DEFAULT_MANAGE_INSTRUCTIONS = (
    "Proactively call this tool when you:\n\n"
    "1. Identify a new USER preference.\n"
    "2. Receive an explicit USER request to remember something or otherwise alter your behavior.\n"
    "3. Are working and want to record important context.\n"
    "4. Identify that an existing MEMORY is incorrect or outdated.\n"
)


class ConfigurationError(BaseException):
    """LangMem's ConfigurationError. Subclasses BaseException on purpose (as
    upstream does) so that LangGraph tool nodes do not swallow it."""


def template_key(element: str) -> str | None:
    """``"{user_id}"`` -> ``"user_id"``; a literal element -> None (upstream's rule)."""
    return element.strip("{}") if element.startswith("{") else None


def resolve_namespace(template: Sequence[str] | None, configurable: Mapping[str, Any]) -> tuple[str, ...]:
    if template is None:
        if "org_id" in configurable and "agent_id" in configurable:
            return ("org", str(configurable["org_id"]), str(configurable["agent_id"]))
        if "user_id" in configurable:
            return ("user", str(configurable["user_id"]))
        raise ConfigurationError(missing_key_message("user_id", configurable))
    out = []
    for element in template:
        key = template_key(element)
        if key is None:
            out.append(element)
        elif key in configurable:
            out.append(str(configurable[key]))
        else:
            raise ConfigurationError(missing_key_message(key, configurable))
    return tuple(out)


def missing_key_message(key: str, configurable: Mapping[str, Any]) -> str:
    return f"Missing key in 'configurable' field: {key}. Available keys: {list(configurable.keys())}"


def check_actions(actions: Sequence[str]) -> tuple[str, ...]:
    """Upstream refuses an empty actions_permitted when the tool is created."""
    if not actions:
        raise ValueError("actions_permitted cannot be empty")
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise ValueError(f"Invalid actions_permitted {unknown}. Each must be one of {ACTIONS}.")
    return tuple(dict.fromkeys(actions))


def default_action(actions: Sequence[str]) -> str:
    return "create" if "create" in actions else actions[0]


def manage_description(actions: Sequence[str], instructions: str) -> str:
    """The tool description upstream builds from the permitted actions and the instructions."""
    if len(actions) == 1:
        verbs = f"{actions[0]} a memory"
    elif len(actions) == 2:
        verbs = f"{actions[0].capitalize()} or {actions[1]} a memory"
    else:
        verbs = f"{', '.join((actions[0].capitalize(), *actions[1:-1]))}, or {actions[-1]} a memory"
    return (
        f"{verbs} to persist across conversations.\n"
        "Include the MEMORY ID when updating or deleting a MEMORY. Omit when creating a new MEMORY - it will be "
        f"created for you.\n{instructions}"
    )


def search_description(instructions: str) -> str:
    return f"Search your long-term memories for information relevant to your current context. {instructions}"


def check_manage_call(action: str, actions: Sequence[str], memory_id: object) -> None:
    """Upstream's ValueErrors, in upstream's order and words."""
    if action not in actions:
        raise ValueError(f"Invalid action {action}. Must be one of {tuple(actions)}.")
    if action == "create" and memory_id is not None:
        raise ValueError(
            "You cannot provide a MEMORY ID when creating a MEMORY. Please try again, omitting the id argument."
        )
    if action in ("delete", "update") and not memory_id:
        raise ValueError("You must provide a MEMORY ID when deleting or updating a MEMORY.")
