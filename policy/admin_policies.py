"""Admin for tenant policies: versions (current, history, a diff between any
two), the apply history with approvers, an apply form that goes through
``policy_apply`` (validate / dry run / apply), and a redaction preview.

Access: ``policy.admin_access`` (a tenant admin sees only their tenant's
policies; a superuser every tenant's). Versions are immutable, so there is no
change or delete; a new policy is applied, never edited in place."""

from __future__ import annotations

import difflib
import json
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from policy import redaction
from policy.admin_access import ReadOnlyAdminMixin, TenantScopedAdminMixin, admin_access, review_caller
from policy.admin_actors import event_token_label, missing_principal_label, principal_labels, token_labels
from policy.document import diff
from policy.errors import PolicyError
from policy.models import PolicyEvent, PolicySigningKey, PolicyVersion, Tenant
from policy.services.policies import PolicyApplyResult, policy_apply


class ApplyForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none())
    yaml = forms.CharField(widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "vLargeTextField"}))
    expected_version = forms.CharField(
        required=False, help_text="Refuse unless this is still the current version (optimistic concurrency)."
    )
    approver = forms.CharField(required=False, max_length=200, help_text="Who approved this change (audited).")
    signature = forms.CharField(
        required=False, help_text="hex HMAC-SHA256 of the YAML under the tenant's signing key, if one is set."
    )
    mode = forms.ChoiceField(
        choices=[("validate_only", "Validate only"), ("dry_run", "Dry run (show what changes)"), ("apply", "Apply")],
        initial="dry_run",
        widget=forms.RadioSelect,
    )


class RedactionPreviewForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 10, "cols": 100}))
    rules = forms.MultipleChoiceField(
        choices=[(name, f"{name}: {rule.description}") for name, rule in redaction.RULES.items()],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="None checked: every rule.",
    )


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdminMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("tenant", "version", "is_current", "applied_at", "applied_by_display", "approver", "signed")
    list_select_related = ("tenant",)
    list_filter = ("is_current", "signed")
    search_fields = ("tenant__slug", "version", "approver", "applied_by_name")
    change_form_template = "admin/policy/policyversion/detail.html"
    change_list_template = "admin/policy/policyversion/change_list.html"
    fields = (
        "tenant",
        "version",
        "is_current",
        "applied_at",
        "applied_by_display",
        "approver",
        "signed",
        "source_sha256",
        "source_pre",
        "document_pre",
    )
    readonly_fields = fields

    @admin.display(description="Applied by")
    def applied_by_display(self, obj: PolicyVersion) -> str:
        return obj.applied_by_name or (str(obj.applied_by) if obj.applied_by else "-")

    @admin.display(description="YAML as applied")
    def source_pre(self, obj: PolicyVersion) -> str:
        return format_html("<pre>{}</pre>", obj.source_yaml)

    @admin.display(description="Normalised policy")
    def document_pre(self, obj: PolicyVersion) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.document, indent=2, ensure_ascii=False))

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("apply/", wrap(self.apply_view), name="policy_policyversion_apply"),
            path("redaction-preview/", wrap(self.redaction_preview_view), name="policy_redaction_preview"),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = self.get_object(request, object_id)
        assert isinstance(obj, PolicyVersion)
        others = list(
            PolicyVersion.objects.filter(tenant_id=obj.tenant_id)
            .exclude(pk=obj.pk)
            .order_by("-major", "-minor", "-patch", "-release_rank", "-id")
        )
        against = self._against(request, obj, others)
        context = dict(extra_context or {})
        context.update(
            others=others,
            against=against,
            changes=diff(against.document, obj.document) if against else [],
            yaml_diff="".join(
                difflib.unified_diff(
                    against.source_yaml.splitlines(keepends=True),
                    obj.source_yaml.splitlines(keepends=True),
                    fromfile=f"version {against.version}",
                    tofile=f"version {obj.version}",
                )
            )
            if against
            else "",
            events=PolicyEvent.objects.filter(tenant_id=obj.tenant_id, version=obj.version).order_by("-id")[:20],
            signing_key_set=PolicySigningKey.objects.filter(tenant_id=obj.tenant_id).exists(),
        )
        return super().change_view(request, object_id, form_url, context)

    @staticmethod
    def _against(request: HttpRequest, obj: PolicyVersion, others: list[PolicyVersion]) -> PolicyVersion | None:
        """The version to diff against: ?against=<id> (same tenant only), else the previous one."""
        wanted = request.GET.get("against")
        if wanted:
            return next((o for o in others if str(o.pk) == wanted), None)
        older = [
            o for o in others if (o.major, o.minor, o.patch, o.release_rank) < (obj.major, obj.minor, obj.patch, 1)
        ]
        return older[0] if older else None

    # --- apply ------------------------------------------------------------------------------
    def apply_view(self, request: HttpRequest) -> HttpResponse:
        access = admin_access(request)
        if access is None or not access.can_write:
            raise PermissionDenied("Only tenant admins may apply policies.")
        form = ApplyForm(request.POST or None, initial=self._apply_initial(request, access))
        field = form.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = access.tenants()
        result: PolicyApplyResult | None = None
        if request.method == "POST" and form.is_valid():
            tenant: Tenant = form.cleaned_data["tenant"]
            mode = form.cleaned_data["mode"]
            try:
                result = policy_apply(
                    caller=review_caller(request, tenant.id),
                    yaml=form.cleaned_data["yaml"].replace("\r\n", "\n"),
                    dry_run=mode == "dry_run",
                    validate_only=mode == "validate_only",
                    expected_version=form.cleaned_data["expected_version"] or None,
                    signature=form.cleaned_data["signature"] or None,
                    approver=form.cleaned_data["approver"],
                    actor_name=f"admin:{access.username}",
                )
            except PolicyError as exc:
                form.add_error(None, f"[{exc.code}] {exc}")
            else:
                if result.applied:
                    messages.success(
                        request,
                        f"Policy {result.version} is now current for {tenant.slug} (was {result.previous_version}).",
                    )
                    current = PolicyVersion.objects.get(tenant=tenant, is_current=True)
                    return HttpResponseRedirect(reverse("admin:policy_policyversion_change", args=[current.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": "Apply a policy",
            "form": form,
            "result": result,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policy/policyversion/apply.html", context)

    @staticmethod
    def _apply_initial(request: HttpRequest, access: Any) -> dict[str, Any]:
        initial: dict[str, Any] = {}
        tenant_id = request.GET.get("tenant")
        if tenant_id:
            try:
                current = PolicyVersion.objects.filter(
                    tenant_id=uuid.UUID(tenant_id), is_current=True, tenant__in=access.tenants()
                ).first()
            except ValueError:
                raise Http404("No such tenant.") from None
            if current is not None:
                initial.update(tenant=current.tenant_id, yaml=current.source_yaml, expected_version=current.version)
        return initial

    # --- redaction preview ----------------------------------------------------------------
    def redaction_preview_view(self, request: HttpRequest) -> HttpResponse:
        if admin_access(request) is None:
            raise PermissionDenied
        form = RedactionPreviewForm(request.POST or None)
        preview = None
        if request.method == "POST" and form.is_valid():
            preview = redaction.redact(form.cleaned_data["text"], form.cleaned_data["rules"] or None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Redaction preview",
            "form": form,
            "preview": preview,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policy/policyversion/redaction_preview.html", context)


@admin.register(PolicyEvent)
class PolicyEventAdmin(ReadOnlyAdminMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    """The apply history: who applied which version, who approved it, and refusals."""

    list_display = ("created_at", "tenant", "event_type", "version", "previous_version", "actor", "token", "approver")
    list_select_related = ("tenant",)
    list_filter = ("event_type",)
    search_fields = ("tenant__slug", "version", "approver", "actor_name")
    readonly_fields = (
        "created_at",
        "tenant",
        "event_type",
        "version",
        "previous_version",
        "actor",
        "actor_name",
        "actor_principal_id",
        "token",
        "actor_token_id",
        "approver",
        "payload",
    )
    fields = readonly_fields

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # The page's rows (the queryset keeps them) with their principals' names
        # and their tokens' labels, in one query each.
        rows = list(changelist.result_list)
        names = principal_labels(row.actor_principal_id for row in rows)
        tokens = token_labels(row.actor_token_id for row in rows)
        for row in rows:
            row.actor_label = self._actor(row, names)
            row.token_label = event_token_label(row.actor_token_id, tokens)
        return changelist

    @staticmethod
    def _actor(event: PolicyEvent, names: dict[uuid.UUID, str]) -> str:
        """The name the service recorded ("admin:root", "manage.py policy_apply"),
        else the principal whose token applied it."""
        if event.actor_name:
            return event.actor_name
        if event.actor_principal_id is None:
            return "-"
        return names.get(event.actor_principal_id) or missing_principal_label(event.actor_principal_id)

    @admin.display(description="actor")
    def actor(self, obj: PolicyEvent) -> str:
        label = getattr(obj, "actor_label", None)
        return label if label is not None else self._actor(obj, principal_labels([obj.actor_principal_id]))

    @admin.display(description="token")
    def token(self, obj: PolicyEvent) -> str:
        """The API token of the call; "no token" for the admin's and commands'."""
        label = getattr(obj, "token_label", None)
        return label if label is not None else event_token_label(obj.actor_token_id, token_labels([obj.actor_token_id]))
