"""Tensor layout: every storage a rectangle (lifetime x offset), planned arena and caching
allocator side by side."""
