"""Memory by module: the bytes live at the peak per module (a table and an icicle); a module
picked here is marked in every view."""
