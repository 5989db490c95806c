"""Targets: what gradaudit can audit, each read into the same graph description."""
