"""One module per ``roam`` sub-command; each exposes ``register(subparsers)``.

Modules here must import quickly: heavy imports (torch, ortools, dash) go inside the
handler function.
"""
