"""Compare two plans: curves, peaks, arenas, extra time, bytes by module and lifetimes of
any two plans of the loaded graph, with the difference."""
