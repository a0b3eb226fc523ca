"""Code that runs inside Megatron training processes (on the training PYTHONPATH), not in the launcher CLI.

Importing the submodules needs megatron-core and torch; this package file imports nothing.
"""

SDPA_SPEC = ("launcher.megatron_ext.sdpa_spec", "layer_spec")
SDPA_SPEC_FAST = ("launcher.megatron_ext.sdpa_spec_fast", "layer_spec")
