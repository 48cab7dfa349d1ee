"""The review admin, one module per capability: ``memories`` (list, search,
detail page, review actions), ``events`` (the audit log, read-only),
``refusals`` (the log of refused tool calls, read-only),
``conflicts`` (candidates to accept or dismiss) and ``dashboard`` (the
per-tenant charts, routed in memproj/urls.py), ``adding`` (the add form that
stores through the services); ``common`` holds what they share and ``site``
names the admin site. Importing the package registers the model admins
(Django's autodiscover)."""

from memory.admin import conflicts, events, memories, refusals, site  # noqa: F401 - registers the ModelAdmins, names the site
