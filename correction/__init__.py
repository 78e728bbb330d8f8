"""On-policy expert correction: failing-turn localization, expert rewrite, selection, data mixing."""
