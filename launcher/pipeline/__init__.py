"""Preset → checked layout → command: every pure step between a YAML file and the argv that runs."""
