"""Offline task builders: HotpotQA long documents and RULER-style synthetic tasks."""

TASKS = ("hotpotqa", "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "fwe")
