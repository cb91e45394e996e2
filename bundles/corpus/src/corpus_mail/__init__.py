"""corpus-mail: the mail server of the attack corpus (drafts, sending through the relay)."""
