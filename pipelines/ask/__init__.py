"""`memagent ask`: one question over one document, on an engine in this process."""
