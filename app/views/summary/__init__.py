"""The summary card: peaks before and after, the saving, the solver's record, why notes."""
