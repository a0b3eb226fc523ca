"""megatron-launch: a thin, checked front door to NVIDIA Megatron-LM."""

__version__ = "0.1.0"
MEGATRON_COMMIT = "432d76b2b8bf036d8a267d5f1623eccd5dbca092"
MEGATRON_CORE_VERSION = "0.18.0"
