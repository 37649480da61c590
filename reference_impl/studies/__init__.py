"""Measuring commands: each writes a data file under docs/data/ (``python -m reference_impl.studies.<name>``)."""
