"""python -m mcp_server --toolset memory            (stdio; token from MEMPROJ_TOKEN)
python -m mcp_server --toolset memory --http     (standalone streamable HTTP)"""

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
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")

    if args.http:
        import uvicorn

        uvicorn.run("memproj.asgi:application", host=args.host, port=args.port, log_level="info")
        return

    import django

    django.setup()
    from memproj.embedded import ensure_for_settings

    ensure_for_settings()
    from mcp_server.server import build_server
    from memory.embeddings import warm_up
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
    build_server(args.toolset, static_caller=caller).run("stdio")


if __name__ == "__main__":
    main()
