"""What a suite sends: arguments from a tool's schema, synthetic texts, workloads, datasets."""
