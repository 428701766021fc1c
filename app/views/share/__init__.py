"""The page's address holds what it shows (graph, plan, zoom, selection): a link reopens it."""
