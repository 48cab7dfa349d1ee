"""Client-side APIs that talk to a running memproj over HTTP (no Django needed)."""
