"""Importing another memory system's store from the admin: the same import as
``manage.py import_memories`` (``memory.services.imports.memories_import``),
with a dry run first.

The page takes the source system, the store (an uploaded file; a superuser may
instead name a path or a ``postgresql://`` URL the server can reach), the
tenant and a namespace. "Dry run" reads the store and shows what would be
created and what would be skipped, and why; the upload is kept in a scratch
directory of its own, bound to the user's session, and "Import" runs the same
import for real. A tenant admin imports into their own tenant only, and only
what they upload: a path or URL would let them read the server's disk or
databases through the import (and a reader option such as mem0's ``history``
names a path too), so both are a superuser's.

A request stays bounded: the upload's size is capped (``IMPORT_MAX_BYTES``),
one run creates at most ``IMPORT_RUN_LIMIT`` memories (the page offers to go on;
a re-run skips what is in already), and embedding is left to the worker.
The imported memories' own events name the tenant admin; a superuser's import
also gets the ``admin_review`` event naming them, as their reviews do."""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.text import get_valid_filename

from memory import validation
from memory.api import DomainError
from memory.importers import systems
from memory.importers.base import parse_position
from memory.services.imports import ImportReport, memories_import
from memory.services.review import admin_review_record
from policy.admin_access import admin_access, require_tenant, review_caller
from policy.models import Tenant

logger = logging.getLogger(__name__)

# One request's worth: a larger store goes through manage.py import_memories.
IMPORT_MAX_BYTES = 64 * 1024 * 1024
# The request body this page takes: the upload with the form's other fields and
# the multipart envelope. The HTTP edge bounds this page's body by it (its
# default limit is far smaller), so the form's own checks answer an upload.
IMPORT_MAX_BODY_BYTES = IMPORT_MAX_BYTES + 1024 * 1024
IMPORT_RUN_LIMIT = 5000
# A staged upload nobody imported is removed after this long.
STAGED_MAX_AGE_SECONDS = 6 * 3600
SESSION_KEY = "memproj_admin_imports"
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")

# What to upload for each system (the help text); the systems missing here read
# only a database URL, which only a superuser may give.
UPLOADS: dict[str, str] = {
    "memproj": "the JSON-lines file `manage.py export` wrote",
    "cogx": "a COGX archive (.cogx.tar.gz)",
    "mem0": "the JSON of Memory.get_all() / an export",
    "langgraph": "a plain pg_dump of the PostgresStore's database (.sql)",
    "mcp-memory": "memory.jsonl of the official MCP memory server",
    "roampal": "a roampal Desktop backup (.zip) or chroma.sqlite3",
    "pce": "the pce-memory DuckDB file ($PCE_DB)",
    "memento": "a JSON export of Memento's Memory nodes",
}


def import_body_limits() -> dict[str, int]:
    """The edge's body limit for this page (memproj.asgi), for its exact path
    only: given without its trailing slash, since a path ending in "/" bounds
    every path under it."""
    return {reverse("admin:memory_memory_import").rstrip("/"): IMPORT_MAX_BODY_BYTES}


def _scratch_root() -> Path:
    return Path(tempfile.gettempdir()) / "memproj-admin-imports"


def _forget_stale_uploads() -> None:
    root = _scratch_root()
    if not root.is_dir():
        return
    cutoff = time.time() - STAGED_MAX_AGE_SECONDS
    for staged in root.iterdir():
        try:
            if staged.stat().st_mtime < cutoff:
                shutil.rmtree(staged, ignore_errors=True)
        except OSError:
            continue


class ImportForm(forms.Form):
    system = forms.ChoiceField(label="Source system", choices=())
    upload = forms.FileField(required=False, label="Store file", help_text="")
    server_location = forms.CharField(
        required=False,
        label="Or a server path or URL",
        help_text="Superusers only: a file or directory on this server, or a postgresql:// URL "
        "(mem0's pgvector table, a LangGraph PostgresStore, a butler's database).",
    )
    options = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Superusers only: reader options, one KEY=VALUE a line (e.g. schema=health, table=mem0, "
        "history=/path/history.db, profile=work).",
    )
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), help_text="The tenant the memories go to.")
    namespace = forms.CharField(
        required=False,
        help_text="A namespace path (segments separated by '/') put in front of every imported memory's namespace.",
    )

    def __init__(self, *args: Any, tenants: Any, superuser: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.superuser = superuser
        present = systems()
        choices = [(name, name) for name in present if superuser or name in UPLOADS]
        system_field = self.fields["system"]
        assert isinstance(system_field, forms.ChoiceField)
        system_field.choices = choices
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        tenant_field.queryset = tenants
        self.fields["upload"].help_text = "; ".join(f"{name}: {UPLOADS[name]}" for name in present if name in UPLOADS)
        self.fields["upload"].help_text += f". At most {IMPORT_MAX_BYTES // (1024 * 1024)} MB."
        if not superuser:
            del self.fields["server_location"]
            del self.fields["options"]

    def clean_upload(self) -> Any:
        upload = self.cleaned_data.get("upload")
        if upload is not None and upload.size > IMPORT_MAX_BYTES:
            raise forms.ValidationError(
                f"The file is larger than an admin import takes ({IMPORT_MAX_BYTES // (1024 * 1024)} MB): "
                "use manage.py import_memories."
            )
        return upload

    def clean_options(self) -> dict[str, str]:
        options: dict[str, str] = {}
        for line in self.cleaned_data.get("options", "").splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(f"One KEY=VALUE a line (got {line.strip()!r}).")
            options[key.strip()] = value.strip()
        return options

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload = data.get("upload")
        location = (data.get("server_location") or "").strip()
        if upload and location:
            raise forms.ValidationError("Upload a file or name a server path or URL, not both.")
        if not upload and not location and "upload" not in self.errors:
            self.add_error("upload", "Upload the store's file.")
        if upload and data.get("system") and data["system"] not in UPLOADS:
            self.add_error("system", f"{data['system']} reads a database: name its postgresql:// URL.")
        return data


def _stage(upload: Any) -> tuple[str, str]:
    """The upload in a scratch directory of its own, under its own (cleaned)
    name, since readers tell formats apart by it (.zip, .cogx.tar.gz)."""
    _forget_stale_uploads()
    token = secrets.token_urlsafe(24)
    directory = _scratch_root() / token
    directory.mkdir(parents=True, mode=0o700)
    name = get_valid_filename(Path(upload.name or "upload").name) or "upload"
    target = directory / name
    with target.open("wb") as handle:
        for chunk in upload.chunks():
            handle.write(chunk)
    return token, str(target)


def _unstage(token: str) -> None:
    if TOKEN_PATTERN.match(token):
        shutil.rmtree(_scratch_root() / token, ignore_errors=True)


def _run(request: HttpRequest, plan: dict[str, Any], *, dry_run: bool) -> ImportReport:
    """One call of the import service for the plan, as this admin user; a
    superuser's real import gets the event naming them."""
    tenant_id = uuid.UUID(plan["tenant_id"])
    access = require_tenant(request, tenant_id, write=True)
    caller = review_caller(request, tenant_id)
    report = memories_import(
        caller=caller,
        system=plan["system"],
        location=plan["location"],
        namespace=plan["namespace"],
        dry_run=dry_run,
        limit=IMPORT_RUN_LIMIT,
        embed=False,
        options=plan["options"],
    )
    if not dry_run:
        detail = {
            "system": plan["system"],
            "source": plan["source_name"],
            "created": report.created_total,
            "skipped": sum(report.skipped.values()),
        }
        if access.is_superuser:
            with transaction.atomic():
                admin_review_record(caller=caller, action="import", username=access.username, detail=detail)
        logger.info("admin import by %s into %s: %s", access.username, tenant_id, detail)
    return report


def _unreadable(plan: dict[str, Any], exc: Exception) -> str:
    if isinstance(exc, DomainError):
        # Our words; an upload is named as uploaded, never by where it is staged.
        message = str(exc)
        if plan["staged"]:
            message = message.replace(str(Path(plan["location"]).parent) + os.sep, "")
        return message
    # An uploaded file is someone else's: a reader meeting a broken one must
    # answer on the form, never with a server error.
    logger.warning("admin import of %s as %s failed", plan["source_name"], plan["system"], exc_info=True)
    # A library's text (a parser's, a database's) is the server's and stays in its
    # log; where a parser stopped is restated in our words.
    where = parse_position(exc)
    reason = where if where else "; the server's log has the details"
    return f"{plan['source_name']} could not be read as a {plan['system']} store{reason}."


def _report_context(report: ImportReport) -> dict[str, Any]:
    return {
        "report": report,
        "report_lines": report.lines(),
        "created": sorted(report.created.items()),
        "skipped": [(reason, count, report.examples.get(reason, [])) for reason, count in report.skipped.most_common()],
    }


def memory_import_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    access = admin_access(request)
    if access is None or not access.can_write:
        raise PermissionDenied("Only tenant admins and superusers may import memories.")
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": "Import memories",
        "subtitle": None,
        "opts": model_admin.model._meta,
        "run_limit": IMPORT_RUN_LIMIT,
    }
    staged: dict[str, Any] = request.session.get(SESSION_KEY, {})
    token = request.POST.get("token", "") if request.method == "POST" else ""
    if token:
        plan = staged.get(token)
        if plan is None:
            context["form"] = ImportForm(tenants=access.tenants(), superuser=access.is_superuser)
            context["error"] = "That dry run is no longer here (it expired or was imported): run it again."
            return TemplateResponse(request, "admin/memory/import_form.html", context)
        try:
            report = _run(request, plan, dry_run=False)
        except (Http404, PermissionDenied):
            raise
        except Exception as exc:
            context.update(plan=plan, token=token, error=_unreadable(plan, exc))
            return TemplateResponse(request, "admin/memory/import_result.html", context)
        if not report.stopped_at_limit:
            staged.pop(token, None)
            if plan["staged"]:
                _unstage(token)
            request.session[SESSION_KEY] = staged
            token = ""
        context.update(plan=plan, token=token, done=True, **_report_context(report))
        return TemplateResponse(request, "admin/memory/import_result.html", context)

    if (
        not access.is_superuser
        and request.method == "POST"
        and (request.POST.get("server_location", "").strip() or request.POST.get("options", "").strip())
    ):
        raise PermissionDenied("Only a superuser may import from a server path or URL, or give reader options.")
    initial: dict[str, Any] = {}
    only = list(access.tenants().values_list("pk", flat=True)[:2])
    if len(only) == 1:
        initial["tenant"] = only[0]
    form = ImportForm(
        request.POST or None,
        request.FILES or None,
        tenants=access.tenants(),
        superuser=access.is_superuser,
        initial=initial,
    )
    too_big = int(request.META.get("CONTENT_LENGTH") or 0) > IMPORT_MAX_BODY_BYTES
    if request.method == "POST" and too_big:
        # Refused before Django spools the body to disk.
        form = ImportForm(tenants=access.tenants(), superuser=access.is_superuser, initial=initial)
        context["form"] = form
        context["error"] = f"The upload is larger than an admin import takes ({IMPORT_MAX_BYTES // (1024 * 1024)} MB)."
        return TemplateResponse(request, "admin/memory/import_form.html", context)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        tenant: Tenant = data["tenant"]
        require_tenant(request, tenant.pk, write=True)
        upload = data.get("upload")
        if upload is not None:
            token, location = _stage(upload)
            source_name = Path(location).name
        else:
            token, location = secrets.token_urlsafe(24), data["server_location"].strip()
            source_name = location
        plan = {
            "system": data["system"],
            "location": location,
            "source_name": source_name,
            "staged": upload is not None,
            "tenant_id": str(tenant.pk),
            "tenant_slug": tenant.slug,
            "namespace": validation.typed_namespace(data.get("namespace") or ""),
            "options": data.get("options") or {},
        }
        try:
            report = _run(request, plan, dry_run=True)
        except (Http404, PermissionDenied):
            if plan["staged"]:
                _unstage(token)
            raise
        except Exception as exc:
            if plan["staged"]:
                _unstage(token)
            form.add_error(None, _unreadable(plan, exc))
        else:
            staged[token] = plan
            request.session[SESSION_KEY] = staged
            context.update(plan=plan, token=token, **_report_context(report))
            return TemplateResponse(request, "admin/memory/import_result.html", context)
    context["form"] = form
    return TemplateResponse(request, "admin/memory/import_form.html", context)
