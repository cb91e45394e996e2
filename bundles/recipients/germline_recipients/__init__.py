"""germline-share: a tool whose result is for a recipient named by its `to` argument; the
signed manifest declares `consumers: {"of_argument": "to"}` (docs/run.md)."""
