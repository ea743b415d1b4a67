"""Seeing what agents do: context tracers (JSONL, LangSmith, Langfuse) and logs an operator
can ship."""
