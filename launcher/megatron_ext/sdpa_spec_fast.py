"""The SDPA layer spec plus the fast stand-ins for Megatron's no-TE/no-apex fallbacks (see fast_ops).

``--spec launcher.megatron_ext.sdpa_spec_fast layer_spec``: importing this module (which Megatron does while it
builds the model, before it builds the optimizer) applies the ops named in ``MEGATRON_LAUNCH_FAST_OPS``.
"""

from launcher.megatron_ext import fast_ops
from launcher.megatron_ext.sdpa_spec import layer_spec

applied_fast_ops = fast_ops.apply_from_environment()
print(f"> megatron-launch fast ops: {','.join(applied_fast_ops) or 'none'}", flush=True)

__all__ = ["applied_fast_ops", "layer_spec"]
