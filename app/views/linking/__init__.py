"""Linked views: one step window (zoom) and one selection for every view."""
