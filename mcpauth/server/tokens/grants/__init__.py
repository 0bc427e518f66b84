"""The grants of the token endpoint, one module each."""
