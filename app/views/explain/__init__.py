"""The Explain panel: why the selected op, tensor or module is where it is."""
