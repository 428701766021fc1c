"""Live tensors: what is live at the clicked step (the planned peak by default)."""
