"""corpus-lint: the lint server of the attack corpus (lint, repository log, CI reports)."""
