"""Fixture tools for germline's evidence layer (issue 10)."""
