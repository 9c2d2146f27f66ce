"""The stork_* commands: one module per command, shared options in `common`."""
