"""Checks of the world around a job: the environment (doctor), data files, Megatron's own verdict."""
