"""How a call reaches the service, and how its answer is judged."""
