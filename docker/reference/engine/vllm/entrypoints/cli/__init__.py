"""vsnap reference engine."""
