"""The harness the reliability and speed suites share (bench/ holds their
command lines; tests/reliability/ and tests/bench/ run them at CI size).

By concern:

- ``stack``: a private `make run` (embedded PostgreSQL and Redis, memproj.serve's
  web, worker and beat), uvicorn alone, the bench databases; ``paths``: var/;
  ``ports``: a test server's port held bound until the server serves on it;
  ``pgrelay``: a PostgreSQL connection to cut or stall.
- ``surfaces``: how a call reaches the service and how its answer is judged:
  in-process MCP sessions, MCP over HTTP, the HTTP routes beside MCP.
- ``generators``: what is sent: arguments from a tool's schema, synthetic
  texts, workloads, the speed benchmark's bulk-loaded dataset.
- ``faults``, ``load``: what is done to a running stack.
- ``isolation``, ``fuzzing``, ``rows``, ``tenants``: the reliability checks and
  the identities and database views they use.
- ``measure``: the speed benchmark's timings (service layer, MCP over HTTP,
  ingest, embedder backends).
- ``reports``: the tables and the speed report.
"""
