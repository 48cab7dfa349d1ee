"""Who may see and change what in the admin: the one place where admin access
is resolved. Every tenant-owned ModelAdmin mixes in
``TenantScopedAdminMixin``; the dashboard and review views call
``admin_access`` / ``require_tenant`` / ``review_caller``.

- superuser: every tenant, read and write;
- staff user whose Principal has role admin: their own tenant, read and write;
- staff user whose Principal is a member: their own tenant, read only, and
  only if the tenant allows it (``Tenant.members_can_review``);
- anyone else: nothing.

Django's per-model permissions are not consulted: the tenant role decides, so a
tenant admin needs no hand-assigned model permissions, and a stray model
permission cannot widen anybody's reach beyond their tenant.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import FieldDoesNotExist, PermissionDenied, ValidationError
from django.db.models import Model, QuerySet
from django.db.models.constants import LOOKUP_SEP
from django.http import Http404, HttpRequest, HttpResponse

from policy.caller import Caller
from policy.models import Principal, Tenant

ADMIN_SCOPES = frozenset({"read", "write", "admin"})
READ_SCOPES = frozenset({"read"})


def holds_nul(value: str) -> bool:
    """PostgreSQL's text cannot hold a NUL character: a query that sends one
    fails, so a value with one is refused before it reaches the database."""
    return "\x00" in value


@dataclass(frozen=True)
class AdminAccess:
    """What one logged-in admin user may reach."""

    is_superuser: bool
    tenant_id: uuid.UUID | None  # None for a superuser: every tenant
    principal_id: uuid.UUID | None
    can_write: bool
    username: str

    def sees_tenant(self, tenant_id: uuid.UUID | None) -> bool:
        return self.is_superuser or (tenant_id is not None and tenant_id == self.tenant_id)

    def scope_queryset(self, queryset: QuerySet, tenant_field: str) -> QuerySet:
        if self.is_superuser:
            return queryset
        return queryset.filter(**{tenant_field: self.tenant_id})

    def tenants(self) -> QuerySet[Tenant]:
        return self.scope_queryset(Tenant.objects.all(), "id")


def _resolve(user: Any) -> AdminAccess | None:
    if not getattr(user, "is_authenticated", False) or not user.is_active or not user.is_staff:
        return None
    if user.is_superuser:
        return AdminAccess(True, None, None, True, user.get_username())
    principal = Principal.objects.select_related("tenant").filter(user=user).first()
    if principal is None:
        return None
    if principal.role == Principal.Role.ADMIN:
        return AdminAccess(False, principal.tenant_id, principal.id, True, user.get_username())
    if principal.tenant.members_can_review:
        return AdminAccess(False, principal.tenant_id, principal.id, False, user.get_username())
    return None


def admin_access(request: HttpRequest) -> AdminAccess | None:
    """Resolved once per request and cached on it."""
    if not hasattr(request, "_memproj_admin_access"):
        request._memproj_admin_access = _resolve(request.user)  # type: ignore[attr-defined]
    cached: AdminAccess | None = request._memproj_admin_access  # type: ignore[attr-defined]
    return cached


def require_tenant(request: HttpRequest, tenant_id: uuid.UUID, *, write: bool = False) -> AdminAccess:
    """404 for a tenant the user cannot see (its existence is not revealed);
    403 for a write by a read-only reviewer."""
    access = admin_access(request)
    if access is None or not access.sees_tenant(tenant_id):
        raise Http404("No such object.")
    if write and not access.can_write:
        raise PermissionDenied("Read-only review access: ask a tenant admin to make this change.")
    return access


def review_caller(request: HttpRequest, tenant_id: uuid.UUID) -> Caller:
    """The Caller that services receive for a write from the admin.

    A tenant admin acts as their own Principal. A superuser has no Principal in
    the row's tenant, so acts as an admin caller of that tenant with no
    principal; the review service records the superuser's username in the audit
    payload (``memory.services.review.admin_review_record``)."""
    access = require_tenant(request, tenant_id, write=True)
    if access.is_superuser:
        return Caller(tenant_id=tenant_id, principal_id=None, role="admin", scopes=ADMIN_SCOPES)
    return Caller(tenant_id=tenant_id, principal_id=access.principal_id, role="admin", scopes=ADMIN_SCOPES)


def read_caller(request: HttpRequest, tenant_id: uuid.UUID) -> Caller:
    """A read-only Caller for selectors (search, stats) on a tenant the user sees."""
    access = require_tenant(request, tenant_id)
    return Caller(
        tenant_id=tenant_id,
        principal_id=access.principal_id,
        role="admin" if access.can_write else "member",
        scopes=READ_SCOPES,
    )


class TenantScopedAdminMixin:
    """Tenant permissions for a ModelAdmin, in one place.

    ``tenant_field`` is the lookup from the model to its tenant id
    ("tenant_id", "principal__tenant_id", "id" for Tenant itself). Lists,
    detail pages, actions, autocomplete and exports all start from
    ``get_queryset``, so filtering there scopes every one of them; ``get_object``
    turns a row outside the user's reach into a 404 instead of the admin's usual
    redirect, so a URL guessed across tenants reveals nothing.

    What a request may ask of a list is bounded here too: the query string
    filters only by the list's own filters, and neither it, an autocomplete
    term nor an action's selection reaches a query the database refuses."""

    tenant_field: str = "tenant_id"
    # Rows of this model may be added / deleted by tenant admins (superusers always may).
    tenant_admin_may_add: bool = True
    tenant_admin_may_delete: bool = False
    # Members with review access may view this model.
    members_may_view: bool = False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = super().get_queryset(request)  # type: ignore[misc]
        access = admin_access(request)
        if access is None:
            return qs.none()
        return access.scope_queryset(qs, self.tenant_field)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Model:
        obj = super().get_object(request, object_id, from_field)  # type: ignore[misc]
        if obj is None:
            raise Http404("No such object.")
        return obj

    # --- permissions -------------------------------------------------------------
    def _viewer(self, request: HttpRequest) -> AdminAccess | None:
        access = admin_access(request)
        if access is None:
            return None
        if not access.can_write and not self.members_may_view:
            return None
        return access

    def _object_tenant_id(self, obj: Model) -> uuid.UUID | None:
        value: Any = obj
        for part in self.tenant_field.split("__"):
            value = getattr(value, part, None)
        return value

    def _in_reach(self, access: AdminAccess, obj: Model | None) -> bool:
        return obj is None or access.sees_tenant(self._object_tenant_id(obj))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._viewer(request) is not None

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        access = self._viewer(request)
        return access is not None and self._in_reach(access, obj)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        access = admin_access(request)
        return access is not None and access.can_write and self._in_reach(access, obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        access = admin_access(request)
        return access is not None and access.can_write and (access.is_superuser or self.tenant_admin_may_add)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        access = admin_access(request)
        if access is None or not access.can_write or not self._in_reach(access, obj):
            return False
        return access.is_superuser or self.tenant_admin_may_delete

    # --- what a request may ask of a list ---------------------------------------
    def _offered_lookups(self, request: HttpRequest | None) -> set[str]:
        """The query-string names the list's own filters read: a simple
        filter's ``parameter_name``; for a field filter, the lookups Django's
        field filters build their links with (``kind__exact``, ``kind__isnull``,
        and ``tenant__id__exact`` for a relation). Nothing else: the field's
        name is not a licence for every lookup on it."""
        names: set[str] = set()
        list_filter = self.get_list_filter(request) if request is not None else self.list_filter  # type: ignore[attr-defined]
        for item in list_filter:
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                names.add(str(item.parameter_name))
                continue
            field_path = str(item[0] if isinstance(item, list | tuple) else item)
            names.update((f"{field_path}{LOOKUP_SEP}exact", f"{field_path}{LOOKUP_SEP}isnull"))
            try:
                field = get_fields_from_path(self.model, field_path)[-1]  # type: ignore[attr-defined]
            except (FieldDoesNotExist, NotRelationField):
                continue
            target = getattr(field, "target_field", None) if field.is_relation else None
            if target is not None:
                names.add(f"{field_path}{LOOKUP_SEP}{target.name}{LOOKUP_SEP}exact")
        return names

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """A list is filtered only through the filters it offers (their own
        lookups, e.g. ``kind__exact``) and by values the database can take.
        Django would take any lookup on the model's own fields, and on a
        filtered field any lookup at all: a scan of the table
        (``?content__regex=``), a query that fails while it is built
        (``?created_at__year=0``) or once it runs (``?scope__regex=(``, a
        regular expression PostgreSQL refuses; ``?kind__unaccent=``, an
        extension not installed). A refused lookup is Django's 400."""
        if holds_nul(lookup) or holds_nul(value):
            return False
        if lookup not in self._offered_lookups(request):
            return False
        return bool(super().lookup_allowed(lookup, value, request))  # type: ignore[misc]

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        # The list's search box refuses a NUL itself (Django's search form); an
        # autocomplete term arrives as sent.
        if holds_nul(search_term):
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)  # type: ignore[misc, no-any-return]

    def response_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """An action runs on a selection of ids of this model only: a value
        that is not one (a malformed UUID, a NUL) would fail the action's
        query. The whole action is refused, as Django refuses an empty
        selection, and the list is shown again with the message."""
        pk = self.model._meta.pk  # type: ignore[attr-defined]
        try:
            for value in request.POST.getlist(ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except ValidationError:
            self.message_user(  # type: ignore[attr-defined]
                request,
                "The selection holds something that is not an id of this list: nothing was changed.",
                messages.WARNING,
            )
            return None
        return super().response_action(request, queryset)  # type: ignore[misc, no-any-return]

    # --- choices in forms are limited to the user's tenant ----------------------
    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        access = admin_access(request)
        related = db_field.remote_field.model
        if access is not None and not access.is_superuser:
            if related is Tenant:
                kwargs["queryset"] = access.tenants()
            elif hasattr(related, "tenant"):
                kwargs["queryset"] = access.scope_queryset(related._default_manager.all(), "tenant_id")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]


class ReadOnlyAdminMixin:
    """Records written only by services (audit events, policy versions and their
    history): the admin shows them and never adds, changes or deletes one. Put it
    before TenantScopedAdminMixin so its answers win."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
