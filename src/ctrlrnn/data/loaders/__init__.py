"""Readers for the standard distribution files of data sets that cannot reach this machine.

Each reads a path the user supplies and raises
:class:`~ctrlrnn.data.errors.DataFormatError` naming the file and line on malformed input.
"""
