"""The Export / import card: plan JSON, MiniMalloc CSV, the offline HTML report, a PNG;
importing a plan file (checked before it is shown)."""
