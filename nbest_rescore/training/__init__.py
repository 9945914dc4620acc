"""Corpus-level training of the language models (``000`` section 5.1)."""
