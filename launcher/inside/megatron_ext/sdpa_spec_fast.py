"""The SDPA layer spec plus the fast stand-ins for Megatron's no-TE/no-apex fallbacks (see fast_ops).

``--spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec``: importing this module (which Megatron does while it
builds the model, before it builds the optimizer) applies the ops named in ``MEGATRON_LAUNCH_FAST_OPS``; with
``layer`` among them the layers are ``CompiledLayer``s (compiled_layer.py).
"""

from dataclasses import replace

from launcher.inside.megatron_ext import fast_ops, save_phases, sdpa_spec

applied_fast_ops = fast_ops.apply_from_environment()
print(f"> megatron-launch fast ops: {','.join(applied_fast_ops) or 'none'}", flush=True)
if save_phases.install_from_environment():
    print("> megatron-launch save phases: timed", flush=True)

if "layer" in applied_fast_ops:
    from launcher.inside.megatron_ext.compiled_layer import CompiledDenseOrMoELayer, CompiledLayer

    mixed = sdpa_spec.layer_spec.module is sdpa_spec.DenseOrMoELayer
    layer_spec = replace(sdpa_spec.layer_spec, module=CompiledDenseOrMoELayer if mixed else CompiledLayer)
else:
    layer_spec = sdpa_spec.layer_spec

__all__ = ["applied_fast_ops", "layer_spec"]
