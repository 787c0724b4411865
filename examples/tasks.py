# examples/tasks.py  (served by: payloadstore daemon tasks:summarize --queue numbers)
"""A module for the CLI's daemon: `payloadstore daemon tasks:summarize --queue numbers`."""


def summarize(values):
    """One JSON list of numbers in; its count, sum and mean out."""
    total = sum(values)
    return {"count": len(values), "sum": total, "mean": total / len(values)}
