"""What every page of the review admin shares: list pages that never count the
big tables, the tenant filter, running a review action through a service (with
the superuser's audit event), bulk actions, the names of the actors of audit
events and of their API tokens, and CSV export.

Admin reads; every write is a service call. Tenant access is decided in
``policy.admin_access`` only."""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ALL_VAR, ChangeList
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from memory.errors import MemoryError_
from memory.models import Memory, MemoryEvent
from memory.services.events import EventType
from memory.services.review import admin_review_record
from policy.admin_access import admin_access, review_caller
from policy.admin_actors import missing_principal_label, principal_labels
from policy.caller import Caller

ACTION_ROW_CAP = 200
# PostgreSQL's OFFSET is a bigint: a page starting past it is on no list.
MAX_OFFSET = 2**63 - 1


# --- lists without COUNT(*) -------------------------------------------------------------
class NoCountPaginator(Paginator):
    """Reads one row past the requested page instead of counting the table:
    the page links go up to the next page, never further. ``count`` is
    therefore a lower bound (exact on the last page)."""

    def __init__(self, object_list: Any, per_page: int, page_number: int = 1, **kwargs: Any) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self._page_number = max(1, page_number)

    @cached_property
    def count(self) -> int:  # type: ignore[override]
        offset = (self._page_number - 1) * self.per_page
        rows = cast(QuerySet, self.object_list)[offset : offset + self.per_page + 1]
        seen = len(rows.values_list("pk", flat=True))
        return offset + seen


class OnePageChangeList(ChangeList):
    """A change list that ignores ``?all=``: Django shows every row when the
    paginator's count is at most ``list_max_show_all``, and the count of a
    NoCountPaginator is only a lower bound, so "show all" would load the
    tenant's whole table."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        # Before the filters build their links: none of the page's links carries it on.
        self.show_all = False
        self.params.pop(ALL_VAR, None)
        self.filter_params.pop(ALL_VAR, None)
        return super().get_queryset(request, exclude_parameters)


class NoCountListMixin:
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    # No "Show all" link: these lists are read one page at a time.
    list_max_show_all = 0

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return OnePageChangeList

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> Paginator:
        try:
            page = int(request.GET.get("p", 1))
        except ValueError:
            page = 1
        if (page - 1) * per_page > MAX_OFFSET:
            # As Django answers a page past the last: the list again, without its parameters.
            raise IncorrectLookupParameters(f"no page {page}")
        return NoCountPaginator(
            queryset, per_page, page_number=page, orphans=0, allow_empty_first_page=allow_empty_first_page
        )


# --- filters ------------------------------------------------------------------------------
class TenantFilter(admin.SimpleListFilter):
    """Lists only the tenants the user may see (never a related-only DISTINCT over memories)."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        access = admin_access(request)
        if access is None:
            return []
        return [(str(t.pk), t.slug) for t in access.tenants().only("id", "slug")[:200]]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value():
            try:
                return queryset.filter(tenant_id=uuid.UUID(self.value()))
            except ValueError:
                return queryset.none()
        return None


# --- running a review action ----------------------------------------------------------------
def run_review(
    request: HttpRequest,
    *,
    tenant_id: uuid.UUID,
    action: str,
    memory: Memory | None,
    call: Callable[[Caller], Any],
    detail: dict[str, Any] | None = None,
    written: Callable[[Any], Memory] | None = None,
) -> Any:
    """One review action: the caller for this admin user, the service call, and
    for a superuser (no Principal in the tenant) an ``admin_review`` event naming
    them, in the same transaction. ``written`` picks the memory out of the
    call's result when the action creates it (``memory`` is None then)."""
    caller = review_caller(request, tenant_id)
    access = admin_access(request)
    with transaction.atomic():
        result = call(caller)
        if access is not None and access.is_superuser:
            target = written(result) if written is not None else memory
            admin_review_record(caller=caller, action=action, username=access.username, memory=target, detail=detail)
    return result


def count_of(count: int, singular: str, plural: str) -> str:
    """ "1 memory", "2 memories": the admin's messages name what they counted."""
    return f"{count} {singular if count == 1 else plural}"


@dataclass(frozen=True)
class BulkAction:
    """How a list action's messages speak: ``done`` is the participle
    ("confirmed"), ``noun`` the row's name, singular and plural."""

    done: str
    noun: tuple[str, str]

    def rows(self, count: int) -> str:
        return count_of(count, *self.noun)


def run_bulk(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    rows: QuerySet,
    *,
    action: BulkAction,
    review: Callable[[Any], None],
) -> None:
    """A list action: ``review`` (one ``run_review``) for each selected row, at
    most ACTION_ROW_CAP of them; a row that fails is reported, the others go on."""
    selected = list(rows[: ACTION_ROW_CAP + 1])
    done, failed = 0, []
    for row in selected[:ACTION_ROW_CAP]:
        try:
            review(row)
            done += 1
        except MemoryError_ as exc:
            failed.append(f"{row.pk}: {exc}")
    if done:
        model_admin.message_user(request, f"{action.rows(done).capitalize()} {action.done}.", level=messages.SUCCESS)
    if failed:
        model_admin.message_user(
            request, f"{action.rows(len(failed)).capitalize()} could not be {action.done}:", level=messages.WARNING
        )
    for failure in failed[:10]:
        model_admin.message_user(request, failure, level=messages.WARNING)
    if len(selected) > ACTION_ROW_CAP:
        model_admin.message_user(
            request,
            f"Only the first {ACTION_ROW_CAP} selected {action.noun[1]} were {action.done}; "
            "run the action again for the rest.",
            level=messages.WARNING,
        )


# --- who did it: the actors of audit events ------------------------------------------------------
def actor_label(event: MemoryEvent, names: dict[uuid.UUID, str]) -> str:
    """Who wrote an audit event, in words: the principal; for a superuser's
    review, the superuser (their service's own event carries no principal, the
    ``admin_review`` event next to it names them); background tasks act with no
    principal."""
    if event.event_type == EventType.ADMIN_REVIEW and isinstance(event.payload, dict):
        superuser = event.payload.get("superuser")
        if superuser:
            return f"{superuser} (superuser)"
    if event.actor_principal_id is None:
        return "no principal"
    return names.get(event.actor_principal_id) or missing_principal_label(event.actor_principal_id)


def with_actor_labels(events: list[MemoryEvent]) -> list[MemoryEvent]:
    """The events, each with ``actor_label`` set for the templates."""
    names = principal_labels(e.actor_principal_id for e in events)
    for event in events:
        event.actor_label = actor_label(event, names)  # type: ignore[attr-defined]
    return events


def memory_anchor(memory_id: uuid.UUID | None) -> str:
    """A short link to a memory's review page."""
    if memory_id is None:
        return "-"
    url = reverse("admin:memory_memory_change", args=[memory_id])
    return format_html('<a href="{}">{}</a>', url, str(memory_id)[:8])


# --- what agents wrote, shown beside the admin's own words -------------------------------------
# Unicode's explicit direction controls (embeddings, overrides and their end,
# isolates): one in an agent's text reorders what follows it on the same line,
# the admin's words and the next tag or JSON member included.
BIDI_CONTROLS = {ord(c): f"\\u{ord(c):04x}" for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"}


def json_text(value: Any) -> str:
    """JSON as stored (a memory's metadata, an event's payload), with direction
    controls written as JSON escapes: the same JSON, and a key or value cannot
    turn the members after it around on the page."""
    return json.dumps(value, ensure_ascii=False, indent=None).translate(BIDI_CONTROLS)


def isolated_list(values: Any) -> str:
    """A list of agents' labels (a memory's tags), each isolated from the others."""
    items = list(values or [])
    if not items:
        return "-"
    return format_html_join(", ", '<bdi class="mp-text">{}</bdi>', ((item,) for item in items))


# A spreadsheet reads a cell starting with one of these as a formula (or, for
# tab and CR, strips them and then may): memories hold what agents and users
# wrote, so "=HYPERLINK(...)" in a memory must reach the reviewer as text.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """One exported cell: text, with a leading single quote when a spreadsheet
    would otherwise evaluate it."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_TRIGGERS) else text


def csv_response(filename: str, header: list[str], rows: Any) -> StreamingHttpResponse:
    """The one place the admin writes CSV; every cell goes through ``csv_cell``."""

    class Echo:
        def write(self, value: str) -> str:
            return value

    writer = csv.writer(Echo())

    def lines() -> Any:
        yield writer.writerow([csv_cell(cell) for cell in header])
        for row in rows:
            yield writer.writerow([csv_cell(cell) for cell in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
