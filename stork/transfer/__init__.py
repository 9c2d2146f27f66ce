"""Transfer modules: one per file, found by (source scheme, destination scheme)."""
