"""The Plan card: the plan-settings form, the Plan job with its progress, Cancel."""
