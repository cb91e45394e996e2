"""corpus-docs: the documents server of the attack corpus (summaries, OCR, blog posts)."""
