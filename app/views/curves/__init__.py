"""Memory before vs after: bytes live at every step, both peaks annotated."""
