"""A run on disk: its directory and manifest, the live monitor, the verdict from the log, the report."""
