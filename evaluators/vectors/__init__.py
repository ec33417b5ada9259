"""Vectors read back from an index (`evalctl vectors export`), for the tasks that work on frozen vectors."""
