"""The `pce` dialect: pce-memory v0.14.0's claims with provenance, active
contexts, feedback, boundary validation and policy apply.

- ``tools.py``: the dialect and its tools (under both the dotted and the
  underscore names);
- ``schemas.py``: the tools' JSON Schemas, verbatim."""
