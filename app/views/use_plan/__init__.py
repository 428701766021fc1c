"""The "Use this plan" card: the code to train with the shown plan and the CLI reproducing it."""
