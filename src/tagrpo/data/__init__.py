"""Data: loading and writing rows (GSM8K / MATH / explicit field names), shared by every stage."""

from tagrpo.data.io import SkippedRow, read_rows, write_rows

__all__ = ["SkippedRow", "read_rows", "write_rows"]
