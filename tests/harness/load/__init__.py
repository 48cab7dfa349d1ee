"""What a suite does to a running stack: writers and readers, a mixed load, contention, throughput."""
