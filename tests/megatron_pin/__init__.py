"""Tests of launcher/megatron (named so that this folder never shadows the real `megatron` package)."""
