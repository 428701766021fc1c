"""The Graph card: pick a sample, drop a graph file, or trace a zoo model."""
