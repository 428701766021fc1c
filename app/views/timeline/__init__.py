"""Operator timeline: one cell per op, coloured by phase, in the compared and planned orders."""
