"""corpus-sql: the SQL (SQLite) server of the attack corpus."""
