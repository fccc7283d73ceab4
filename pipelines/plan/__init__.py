"""`memagent plan`: the hardware and hours a config needs, before it runs (command.py)."""
