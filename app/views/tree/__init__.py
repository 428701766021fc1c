"""Task division: the planner's tree of sub-tasks, mounted lazily; a click zooms every view."""
