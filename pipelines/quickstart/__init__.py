"""`memagent quickstart`: pipelines.quickstart.command."""
