"""Fixture tools for germline's declared flows and broker denials (issue 25)."""
