"""Code that runs inside training processes (megatron_ext, the all-reduce check, the verdict worker).

Nothing here is imported by the launcher CLI itself: these modules need torch and, mostly, megatron-core.
"""
