"""Machine facts recorded with every timing: allocator, hardware, precision flags; atomic writes."""
