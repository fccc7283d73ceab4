"""Offline task builders: HotpotQA and SQuAD long documents, and RULER-style synthetic tasks."""

TASKS = ("hotpotqa", "squad", "squad_synth", "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "fwe")
