"""The per-object step of the pipeline: read -> decode -> tokenize -> slice -> write.

`ObjectIngester` is a plain class (state: one fast tokenizer), called by Ray Data's
`map_batches` on batches of source objects, or directly in-process by tests and the
local runner. It returns one summary row per object; the driver commits them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from pipelines.ingest.config import IngestConfig
from pipelines.data.manifest import DONE, REFUSED, ObjectEntry, Quarantine
from pipelines.ingest.readers import BadObject, read_object
from pipelines.ingest.sources import SourceObject
from pipelines.ingest.tokenize import DocTokens, tokenize_docs
from pipelines.data.tokenizer import tokenizer_id
from pipelines.ingest.writer import ChunkWriter
from pipelines.storage import first_line, resolve

SOURCE_FIELDS = list(SourceObject.__dataclass_fields__)


@dataclass
class ObjectResult:
    entry: ObjectEntry
    quarantine: list[Quarantine] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)

    def to_row(self) -> dict:
        return {"entry": json.dumps(asdict(self.entry)), "quarantine": json.dumps([asdict(q) for q in self.quarantine]),
                "doc_ids": json.dumps(self.doc_ids)}

    @classmethod
    def from_row(cls, row: dict) -> "ObjectResult":
        return cls(ObjectEntry(**json.loads(row["entry"])), [Quarantine(**q) for q in json.loads(row["quarantine"])],
                   json.loads(row["doc_ids"]))


class ObjectIngester:
    def __init__(self, store_uri: str, cfg: IngestConfig, tokenizer: Any = None, model_ref: str = "",
                 home: str = ""):
        if tokenizer is None:
            from pipelines.config import home_dir
            from pipelines.data.tokenizer import load_backend

            self.backend, self.tokenizer_id = load_backend(model_ref, home_dir(home))  # this node's home
        else:
            self.backend, self.tokenizer_id = tokenizer.backend_tokenizer, tokenizer_id(tokenizer)
        self.cfg = cfg
        self.fs, self.root = resolve(store_uri)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch_fast(texts, add_special_tokens=False)]

    def __call__(self, batch: dict) -> dict:
        """Ray Data UDF: a batch of SourceObject columns -> a batch of ObjectResult rows."""
        n = len(batch["uri"])
        objs = [SourceObject(**{k: _py(batch[k][i]) for k in SOURCE_FIELDS}) for i in range(n)]
        rows = [self.ingest(o).to_row() for o in objs]
        return {k: [r[k] for r in rows] for k in ("entry", "quarantine", "doc_ids")}

    def ingest(self, obj: SourceObject) -> ObjectResult:
        writer = ChunkWriter(self.fs, self.root, obj, self.tokenizer_id, self.cfg.chunk_size, self.cfg.row_group_chunks)
        result = ObjectResult(ObjectEntry(obj.uri, obj.version, obj.size, DONE))
        try:
            self._fill(obj, writer, result)
            file = writer.close()
        except BadObject as e:
            writer.abort()
            return self._refused(obj, str(e))
        except OSError as e:
            writer.abort()
            return self._refused(obj, f"unreadable object ({first_line(e)})")
        result.entry = ObjectEntry(obj.uri, obj.version, obj.size, DONE, writer.docs, writer.n_rows,
                                   writer.tokens, file)
        return result

    def _refused(self, obj: SourceObject, reason: str) -> ObjectResult:
        return ObjectResult(ObjectEntry(obj.uri, obj.version, obj.size, REFUSED),
                            [Quarantine(obj.uri, reason, None, obj.version)])

    def _fill(self, obj: SourceObject, writer: ChunkWriter, result: ObjectResult) -> None:
        seen: set[str] = set()
        items = read_object(obj, self.cfg.text_field, self.cfg.id_field)
        for item in tokenize_docs(items, self.encode_batch, self.cfg.batch_chars, self.cfg.piece_chars):
            if isinstance(item, Quarantine):
                result.quarantine.append(item)
            elif reason := self._refuse_doc(item, seen):
                result.quarantine.append(Quarantine(obj.uri, reason, item.line, obj.version))
            else:
                seen.add(item.doc_id)
                n = -(-len(item.ids) // self.cfg.chunk_size)
                writer.add_doc(item.doc_id, n, len(item.ids), self.chunks_with_text(item.ids))
                result.doc_ids.append(item.doc_id)

    def chunks_with_text(self, ids, group: int = 64) -> Iterator[tuple[list[int], str]]:
        """(token ids, text) per chunk, decoded a group at a time: a long document never
        exists as Python lists all at once."""
        cs, carry = self.cfg.chunk_size, []
        n = -(-len(ids) // cs)
        for g in range(0, n, group):
            chunks = [ids[i * cs:(i + 1) * cs].tolist() for i in range(g, min(n, g + group))]
            texts = self.backend.decode_batch(chunks, skip_special_tokens=False)
            if carry or any("\ufffd" in t for t in texts):
                texts, carry = self.exact_texts(chunks, carry, last=g + group >= n)
            yield from zip(chunks, texts)

    def exact_texts(self, chunks: list[list[int]], carry: list[int], last: bool) -> tuple[list[str], list[int]]:
        """Texts that join to the document exactly: a character whose bytes straddle a chunk
        boundary goes whole into the later chunk's text. Returns (texts, ids carried on)."""
        out = []
        for i, chunk in enumerate(chunks):
            ids, k = carry + chunk, 0
            text = self.backend.decode(ids, skip_special_tokens=False)
            more = not last or i < len(chunks) - 1
            while more and text.endswith("\ufffd") and k < min(4, len(ids) - 1):
                k += 1
                text = self.backend.decode(ids[:-k], skip_special_tokens=False)
            carry = ids[len(ids) - k:] if k else []
            out.append(text)
        return out, carry

    @staticmethod
    def _refuse_doc(doc: DocTokens, seen: set[str]) -> str | None:
        if doc.blank or not doc.ids:
            return "empty text"
        if doc.doc_id in seen:
            return f"duplicate doc_id '{doc.doc_id}' in the same object"
        return None


def _py(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
