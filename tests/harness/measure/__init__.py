"""The speed benchmark's timings."""
