from memproj.celery import app as celery_app

# The service's version: MCP clients see it as serverInfo.version.
__version__ = "0.1.0"

__all__ = ["__version__", "celery_app"]
