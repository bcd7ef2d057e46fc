"""Real data sources that reach this machine inside packages (PyPI, Debian, npm)."""
