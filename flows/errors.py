"""`ConfigError`, in a module of its own so that the settings records `flows/config.py` imports (the round's
placement among them) can raise it without importing `flows/config.py` back."""


class ConfigError(ValueError):
    """A config problem, with the offending key in the message."""
