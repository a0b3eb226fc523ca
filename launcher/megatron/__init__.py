"""What the launcher knows of Megatron-LM: its argument catalog (args) and the pinned checkout (pin)."""
