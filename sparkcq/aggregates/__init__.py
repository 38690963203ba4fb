"""Aggregates beyond the built-ins: the user-defined aggregate framework.

``user.py`` defines what a user aggregate is and loads one by name, ``runner.py`` runs the
instances of one operator's user aggregates inside Spark's Python workers, ``library.py``
holds the aggregates sparkcq ships (median, percentile, mode, exact count of distinct
values) written as a user would write theirs.
"""
