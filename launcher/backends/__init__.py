"""Backends touch the world: processes here (local) or a Slurm cluster (slurm)."""
