"""The Search card: modules, ops and storages by name."""
