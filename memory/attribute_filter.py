"""LangGraph's store ``filter`` on a memory's attributes, in SQL: the one
definition of what a ``filter`` matches, for the channels' statement
(``memory.retrieval``) and the newest-first list (``memory_list_recent``) alike,
so a filter narrows the candidates before any limit or offset.

A filter maps attribute names to conditions. ``content`` is the memory's text,
any other name a top-level key of its ``metadata`` (a LangGraph item's value
without its ``content``). As LangGraph's ``PostgresStore`` (langgraph-checkpoint-
postgres 3.2.0, ``_prepare_batch_search_queries`` / ``_get_filter_condition``):

- a value that is not an object (text, number, boolean, null, list) is jsonb
  equality: a list equals only the same list, null only a stored null (a key
  the value lacks matches nothing);
- an object with a key starting with ``$`` holds operators, each a condition:
  ``$eq`` and ``$ne`` (jsonb equality, inequality: a missing key matches
  neither), ``$gt``, ``$gte``, ``$lt``, ``$lte`` (on the stored value's text
  for a text operand, as upstream does);
- an unknown operator, or an operator object with a plain key too, is refused
  with upstream's message (``Unsupported operator: $in``); an empty object adds
  no condition.

Beyond PostgresStore, where it refuses or misleads:

- an object without operators is a nested match, as LangGraph's
  ``InMemoryStore`` does (``_compare_values``): ``{"a": {"b": 1}}`` matches a
  value whose ``a`` is an object with ``b`` equal to 1 (other keys of ``a`` do
  not matter), operators allowed at any level (``{"a": {"b": {"$gt": 1}}}``);
  PostgresStore takes ``b`` for an operator and raises;
- a range operator with a number compares numbers: only a stored JSON number
  matches (PostgresStore compares ``str(number)`` with the stored text, so 9
  passed ``{"$gte": 10}``: langgraph issue 7684); with anything but a number or
  a text it is refused (PostgresStore compared Python's ``str()`` of it).

Bounds: at most ``MAX_CONDITIONS`` conditions, paths of at most
``MAX_PATH`` keys, keys of 1-100 characters, each value a JSON value within
``validation.json_value``'s limits."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from memory import validation
from memory.errors import InvalidArgument
from memory.models import Memory

# The attribute that names a memory's text rather than a metadata key.
CONTENT_ATTRIBUTE = "content"
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
MAX_CONDITIONS = 20
MAX_PATH = 5  # the top-level key and four nested ones
MAX_KEY_CHARS = 100


@dataclass(frozen=True)
class Condition:
    """One condition: the value at ``path`` (a top-level attribute, then keys
    into nested objects) compared by ``op`` (one of ``OPERATORS``)."""

    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True)
class AttributeFilter:
    """A checked filter: every condition holds (an empty one matches all)."""

    conditions: tuple[Condition, ...]

    def __bool__(self) -> bool:
        return bool(self.conditions)


def parse(value: object) -> AttributeFilter | None:
    """A client's ``filter`` checked and flattened into conditions; None when
    it sets none. InvalidArgument for anything outside the bounds, an unknown
    operator or an operand an operator cannot compare."""
    if not value:  # as upstream's ``if op.filter``
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument('filter must be an object of attribute: value pairs, e.g. {"category": "preference"}.')
    conditions: list[Condition] = []
    for key, item in value.items():
        _condition(conditions, (_key(key),), item)
    return AttributeFilter(tuple(conditions)) if conditions else None


def _key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise InvalidArgument(f"filter keys must be attribute names of 1-{MAX_KEY_CHARS} characters.")
    return validation.encodable(key, field="a filter key")


def _name(path: tuple[str, ...]) -> str:
    return repr(".".join(path))


def _add(conditions: list[Condition], condition: Condition) -> None:
    if len(conditions) >= MAX_CONDITIONS:
        raise InvalidArgument(f"filter must set at most {MAX_CONDITIONS} conditions.")
    conditions.append(condition)


def _condition(conditions: list[Condition], path: tuple[str, ...], item: object) -> None:
    if not isinstance(item, Mapping):
        _add(conditions, Condition(path, "$eq", validation.json_value(item, field=f"filter {_name(path)}")))
        return
    if any(isinstance(k, str) and k.startswith("$") for k in item):
        # As both upstream stores: an object with an operator holds operators only.
        for op, operand in item.items():
            if op not in OPERATORS:
                raise InvalidArgument(
                    f"Unsupported operator: {op} (filter {_name(path)}; the operators are {', '.join(OPERATORS)})."
                )
            _add(conditions, Condition(path, op, _operand(path, op, operand)))
        return
    for key, nested in item.items():
        if len(path) >= MAX_PATH:
            raise InvalidArgument(f"filter {_name(path)} is nested more than {MAX_PATH} keys deep.")
        _condition(conditions, (*path, _key(key)), nested)


def _operand(path: tuple[str, ...], op: str, operand: object) -> object:
    if op in RANGE_SQL and (isinstance(operand, bool) or not isinstance(operand, (int, float, str))):
        raise InvalidArgument(
            f"filter {_name(path)}: {op} compares with a number or a text (got {type(operand).__name__})."
        )
    return validation.json_value(operand, field=f"filter {_name(path)} {op}")


def where(flt: AttributeFilter, *, table: str = "m", prefix: str = "attr") -> tuple[str, dict[str, object]]:
    """The filter as a condition with named parameters (``%(attr_0)s``, ...),
    for a statement written by hand (the channels' ``_where``)."""
    params: dict[str, object] = {}

    def param(value: object) -> str:
        name = f"{prefix}_{len(params)}"
        params[name] = value
        return f"%({name})s"

    return sql(flt, table=table, param=param), params


def expression(flt: AttributeFilter) -> RawSQL:
    """The filter as a boolean expression a ``Memory`` queryset filters on."""
    params: list[object] = []

    def param(value: object) -> str:
        params.append(value)
        return "%s"

    table = connection.ops.quote_name(Memory._meta.db_table)
    return RawSQL(sql(flt, table=table, param=param), params, output_field=BooleanField())  # noqa: S611


def sql(flt: AttributeFilter, *, table: str, param: Callable[[object], str]) -> str:
    """The filter as one SQL condition on the memory table (or alias) ``table``;
    ``param`` adds a value to the statement and answers its placeholder."""
    return " AND ".join(_condition_sql(c, table, param) for c in flt.conditions)


def _condition_sql(condition: Condition, table: str, param: Callable[[object], str]) -> str:
    path, op, value = condition.path, condition.op, condition.value
    if path[0] == CONTENT_ATTRIBUTE:
        return _content_sql(condition, f"{table}.content", param)
    if op == "$eq":
        return f"{_stored(path, table, param)} = {param(json.dumps(value))}::jsonb"
    if op == "$ne":
        return f"{_stored(path, table, param)} <> {param(json.dumps(value))}::jsonb"
    compare = RANGE_SQL[op]
    if isinstance(value, str):
        # The stored value's text, as PostgresStore's ``value->>key``.
        return f"({_stored(path, table, param)} #>> '{{}}') {compare} {param(value)}::text"
    # A CASE: the cast is evaluated only for a number (an AND has no order).
    return (
        f"(CASE WHEN jsonb_typeof({_stored(path, table, param)}) = 'number' "
        f"THEN {_stored(path, table, param)}::numeric {compare} {param(repr(value))}::numeric ELSE false END)"
    )


def _stored(path: tuple[str, ...], table: str, param: Callable[[object], str]) -> str:
    """The jsonb value at ``path`` (NULL where there is none). ``->`` with a
    text key: NULL where a value on the way is not an object (an array is not
    indexed by a key that reads as a number)."""
    stored = f"{table}.metadata"
    for key in path:
        stored = f"({stored} -> {param(key)}::text)"
    return stored


def _content_sql(condition: Condition, column: str, param: Callable[[object], str]) -> str:
    """``content`` is text: a key under it, a number or a non-text equality matches nothing."""
    op, value = condition.op, condition.value
    if len(condition.path) > 1:
        return "false"
    if op == "$ne":
        return f"{column} <> {param(value)}::text" if isinstance(value, str) else "true"
    if not isinstance(value, str):
        return "false"
    return f"{column} {'=' if op == '$eq' else RANGE_SQL[op]} {param(value)}::text"
