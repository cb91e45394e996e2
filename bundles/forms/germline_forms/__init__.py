"""germline-forms: a benign tool that forwards its structured argument to ocr.example
(docs/policy.md, "Inline values": labels by structural path)."""
