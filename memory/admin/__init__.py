"""The review admin, one module per capability: ``memories`` (list, search,
detail page, review actions), ``events`` (the audit log, read-only),
``conflicts`` (candidates to accept or dismiss) and ``dashboard`` (the
per-tenant charts, routed in memproj/urls.py); ``common`` holds what they share.
Importing the package registers the model admins (Django's autodiscover)."""

from memory.admin import conflicts, events, memories  # noqa: F401 - registers the ModelAdmins
