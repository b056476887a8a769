"""The Flask REST service over ``predictor`` (to come)."""
