"""What a conversation keeps: history stores (JSONL, Postgres), the transcript store the
workflows refer to by head, compaction, and records encrypted at rest."""
