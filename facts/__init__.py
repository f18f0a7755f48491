"""Dated facts the program, the operator tools and the measurement kit all read: list prices
(`prices`), machine shapes (`machines`), GPU datasheets and the model catalogue (`catalogue`).

Every figure names its source and the date it was read. This package imports nothing else of the
project, so any layer may depend on it.
"""
