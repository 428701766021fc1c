"""The guided walkthrough: what the planner did, step by step (and what a teaching graph
teaches)."""
