"""Logged transitions on Parquet (ReAgent's columns): writing them from an env, reading them back
validated and shared out over ranks."""
