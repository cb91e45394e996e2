"""corpus-web: the web server of the attack corpus (fetch, page previews, publishing)."""
