"""The contracts every stage shares: task rows, the chunk store and its manifest, the document
index, the tokenizer identity. Knows no stage: ingest writes these, every other stage reads them."""
