"""Targets: one module per place a plan runs; each a pure translator to a request, plus a thin submit."""
