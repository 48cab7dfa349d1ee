"""What the suites print."""
