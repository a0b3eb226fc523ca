"""`launch import`: an existing training script or flag list → a checked preset (see build.py, report.py)."""
