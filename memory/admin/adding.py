"""Adding a memory by hand: a form that chooses the tenant and the kind, and
stores through the same services an agent's tools use (``episode_store``,
``fact_store``, ``rule_store``), so every rule of a write applies (validation,
a fact superseding the active one with its subject and predicate, scope TTLs,
quotas, the audit event). A superuser's add is recorded with their name as
every superuser review is (``run_review``). The services' refusals come back
as form errors, on the field they name."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.forms.utils import pretty_name
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from memory import validation
from memory.admin.common import count_of, run_review
from memory.api import DomainError, episode_store, fact_store, rule_store
from memory.models import EmbeddingStatus, Kind, Memory
from memory.scoring import DECAY_RATES, DEFAULT_PERMANENCE
from policy.admin_access import admin_access
from policy.caller import Caller
from policy.document import BOUNDARY_CLASSES, DEFAULT_BOUNDARY_CLASS
from policy.models import Tenant

KIND_CHOICES = [
    (Kind.FACT.value, "Fact: what is true now; a newer fact with the same subject and predicate replaces it"),
    (Kind.RULE.value, "Rule: how to act; starts as a candidate and matures with feedback"),
    (Kind.EPISODE.value, "Episode: what happened, as an agent would record it"),
]

# The fields that apply to one kind only, or to some kinds; the others apply to every kind.
FIELDS_OF_KIND: dict[str, tuple[str, ...]] = {
    "subject": (Kind.FACT,),
    "predicate": (Kind.FACT,),
    "namespace": (Kind.FACT,),
    "permanence": (Kind.FACT,),
    "butler": (Kind.EPISODE,),
    "session_id": (Kind.EPISODE,),
    "importance": (Kind.FACT, Kind.EPISODE),
    "boundary_class": (Kind.FACT, Kind.RULE),
}

# How the services name a field in their messages, when it is not the form's name.
SERVICE_FIELD_NAMES = {"tag": "tags", "namespace segment": "namespace"}


class MemoryAddForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), help_text="The tenant the memory belongs to.")
    kind = forms.ChoiceField(choices=KIND_CHOICES, initial=Kind.FACT, widget=forms.RadioSelect)
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}))
    subject = forms.CharField(
        required=False,
        help_text="Facts: what the fact is about (e.g. 'alice'). Empty: a fact nothing supersedes automatically.",
    )
    predicate = forms.CharField(
        required=False, help_text="Facts: which of its attributes (e.g. 'editor'); needs a subject."
    )
    namespace = forms.CharField(
        required=False,
        help_text="Facts: a namespace path, segments separated by '/' (e.g. users/alice). Empty: the root.",
    )
    permanence = forms.ChoiceField(
        required=False,
        choices=[(name, f"{name} (decays {rate:g}/day)") for name, rate in DECAY_RATES.items()],
        initial=DEFAULT_PERMANENCE,
        help_text="Facts: how fast the confidence fades without confirmation.",
    )
    butler = forms.CharField(required=False, help_text="Episodes: the agent that recorded it (required for episodes).")
    session_id = forms.CharField(required=False, help_text="Episodes: the conversation it belongs to (optional).")
    importance = forms.FloatField(
        required=False,
        min_value=0,
        max_value=10,
        initial=5.0,
        help_text="Facts and episodes: 0 to 10; it weighs in ranking.",
    )
    boundary_class = forms.ChoiceField(
        required=False,
        choices=[(name, name) for name in BOUNDARY_CLASSES],
        initial=DEFAULT_BOUNDARY_CLASS,
        help_text="Facts and rules: which boundary class of the tenant's policy governs who may read it.",
    )
    scope = forms.CharField(
        initial="global",
        help_text="'global', a scope of the tenant's policy (session, project, principle: each expires after the "
        "policy's time to live), or a label of your own.",
    )
    tags = forms.CharField(required=False, help_text="Comma-separated.")

    def __init__(self, *args: Any, tenants: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        tenant_field.queryset = tenants
        for name, kinds in FIELDS_OF_KIND.items():
            # The page's script shows only the fields of the chosen kind.
            self.fields[name].widget.attrs["data-kinds"] = " ".join(kinds)

    def clean(self) -> dict[str, Any]:
        """A field of another kind must be left as it is (a subject typed for a
        rule would otherwise be dropped without a word); one left empty takes
        its default (the page's script disables the fields of other kinds, so
        they are not sent)."""
        data = super().clean() or {}
        kind = data.get("kind")
        for name, kinds in FIELDS_OF_KIND.items():
            if name not in data:
                continue  # the field's own error is reported already
            initial = self.fields[name].initial
            value = data[name]
            if value in ("", None):
                data[name] = initial if initial is not None else ""
            elif kind and kind not in kinds and value != initial:
                owners = " and ".join(f"{k}s" for k in kinds)
                self.add_error(name, f"Only {owners} have a {pretty_name(name).lower()}; clear it or choose that kind.")
        return data

    def service_error(self, error: DomainError) -> None:
        """A service's refusal, on the field it is about: the one its message
        starts with (the services name the argument first: "butler must be
        ..."), else the one field it names ("at most 32 tags ..."), else above
        the form."""
        message = str(error)
        names = {**{name: name for name in self.fields}, **SERVICE_FIELD_NAMES}
        for said, name in sorted(names.items(), key=lambda item: -len(item[0])):
            if message.startswith(f"{said} "):
                self.add_error(name, message)
                return
        words = set(re.findall(r"[a-z_]+", message))
        named = {name for said, name in names.items() if said in words}
        self.add_error(named.pop() if len(named) == 1 else None, message)


@dataclass
class Stored:
    memory: Memory
    superseded: list[Any] = field(default_factory=list)


def _tags(text: str) -> list[str]:
    return [tag.strip() for tag in text.split(",") if tag.strip()]


def _store_call(data: dict[str, Any]) -> Callable[[Caller], Stored]:
    """The service call the form asks for, with the arguments of its kind."""
    kind, content, scope, tags = data["kind"], data["content"], data["scope"], _tags(data["tags"])
    if kind == Kind.FACT:

        def store_fact(caller: Caller) -> Stored:
            result = fact_store(
                caller=caller,
                subject=data["subject"] or None,
                predicate=data["predicate"] or None,
                content=content,
                importance=data["importance"],
                permanence=data["permanence"],
                scope=scope,
                tags=tags,
                namespace=validation.typed_namespace(data["namespace"]),
                boundary_class=data["boundary_class"],
            )
            return Stored(result.memory, list(result.superseded_all_ids))

        return store_fact
    if kind == Kind.RULE:
        return lambda caller: Stored(
            rule_store(caller=caller, content=content, scope=scope, tags=tags, boundary_class=data["boundary_class"])
        )
    return lambda caller: Stored(
        episode_store(
            caller=caller,
            content=content,
            butler=data["butler"],
            session_id=data["session_id"] or None,
            importance=data["importance"],
            scope=scope,
            tags=tags,
        )
    )


def _stored_message(stored: Stored, tenant_slug: str) -> str:
    memory = stored.memory
    url = reverse("admin:memory_memory_change", args=[memory.pk])
    text = memory.content if len(memory.content) <= 60 else memory.content[:57] + "..."
    stored_in = format_html('Stored {} <a href="{}">“{}”</a> in tenant {}.', memory.kind, url, text, tenant_slug)
    parts: list[str] = [stored_in]
    if stored.superseded:
        earlier = count_of(len(stored.superseded), "earlier fact", "earlier facts")
        parts.append(f"It supersedes {earlier} with the same subject and predicate.")
    if memory.embedding_status != EmbeddingStatus.READY:
        parts.append("Its embedding is pending: the worker adds it; keyword search finds it meanwhile.")
    return format_html_join(" ", "{}", ((part,) for part in parts))


def memory_add_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    if not model_admin.has_add_permission(request):
        raise PermissionDenied("Only tenant admins and superusers may add memories.")
    access = admin_access(request)
    assert access is not None  # has_add_permission said so
    tenants = access.tenants()
    initial: dict[str, Any] = {key: request.GET[key] for key in ("tenant", "kind") if request.GET.get(key)}
    if "tenant" not in initial:
        only = list(tenants.values_list("pk", flat=True)[:2])
        if len(only) == 1:
            initial["tenant"] = only[0]
    form = MemoryAddForm(request.POST or None, tenants=tenants, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        tenant = data["tenant"]
        try:
            stored: Stored = run_review(
                request,
                tenant_id=tenant.pk,
                action="add",
                memory=None,
                detail={"kind": data["kind"]},
                call=_store_call(data),
                written=lambda result: result.memory,
            )
        except DomainError as exc:
            form.service_error(exc)
        else:
            model_admin.log_addition(request, stored.memory, [{"added": {}}])
            messages.success(request, _stored_message(stored, tenant.slug))
            if "_addanother" in request.POST:
                again = urlencode({"tenant": tenant.pk, "kind": data["kind"]})
                return HttpResponseRedirect(f"{reverse('admin:memory_memory_add')}?{again}")
            return HttpResponseRedirect(reverse("admin:memory_memory_changelist"))
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Add memory",
        "subtitle": None,
        "form": form,
        "opts": opts,
        "fieldsets": [
            {"title": title, "kinds": kinds, "fields": [form[name] for name in names]}
            for title, kinds, names in (
                ("", "", ("tenant", "kind", "content")),
                ("Fact", Kind.FACT, ("subject", "predicate", "namespace", "permanence")),
                ("Episode", Kind.EPISODE, ("butler", "session_id")),
                ("Options", "", ("importance", "boundary_class", "scope", "tags")),
            )
        ],
    }
    return TemplateResponse(request, "admin/memory/memory/add_form.html", context)
