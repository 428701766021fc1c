"""What fits: peak memory against batch size (and sequence length) for a zoo model."""
