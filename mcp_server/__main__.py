"""python -m mcp_server --toolset memory            (stdio; token from MEMPROJ_TOKEN)
python -m mcp_server --toolset memory --http     (standalone streamable HTTP)

Per-connection dialect options (the same names as the HTTP endpoint's query
parameters), e.g. for langmem:
python -m mcp_server --toolset langmem --namespace 'memories,{user_id}' --configurable user_id=u-123"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mcp_server")
    parser.add_argument("--toolset", default="memory")
    parser.add_argument("--http", action="store_true", help="serve the whole ASGI app (admin + /mcp/*) instead")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    options = parser.add_argument_group("per-connection options (langmem)")
    options.add_argument("--namespace", help="namespace template, elements comma-separated: memories,{user_id}")
    options.add_argument("--actions-permitted", help="comma-separated: create,update,delete")
    options.add_argument("--instructions", help="included in the manage_memory tool description")
    options.add_argument("--response-format", choices=["content", "content_and_artifact"])
    options.add_argument(
        "--configurable", action="append", default=[], metavar="KEY=VALUE", help="runtime config value (repeatable)"
    )
    args = parser.parse_args()
    connection = {
        name: value
        for name, value in (
            ("namespace", args.namespace),
            ("actions_permitted", args.actions_permitted),
            ("instructions", args.instructions),
            ("response_format", args.response_format),
        )
        if value is not None
    }
    for pair in args.configurable:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--configurable takes KEY=VALUE (got {pair!r})")
        connection[f"configurable.{key}"] = value
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")

    if args.http:
        from memproj.serve import web

        web(host=args.host, port=args.port)  # the web process of `make run`, with its edge settings
        return

    import django

    django.setup()
    from memproj.embedded import ensure_for_settings

    ensure_for_settings()
    import anyio

    from mcp_server.server import build_server
    from mcp_server.stdio import serve_stdio
    from memory.embeddings import warm_up
    from memproj.heap import freeze_startup_heap
    from policy.services.tokens import token_authenticate

    token = os.environ.get("MEMPROJ_TOKEN", "")
    caller = token_authenticate(token)
    if caller is None:
        sys.stderr.write(
            "memproj: MEMPROJ_TOKEN is missing or not a valid token. "
            "Create one with: python manage.py issue_token --tenant T --principal P\n"
        )
        sys.exit(2)
    warm_up()
    from mcp_server.dialect import connection_options

    # Set before the server starts: every task it spawns inherits the options.
    connection_options.set(connection)
    server = build_server(args.toolset, static_caller=caller)
    freeze_startup_heap()
    anyio.run(serve_stdio, server, token)


if __name__ == "__main__":
    main()
