"""The ``.lance`` data file container: footer, offset tables, column metadata, reader and writer."""
from lance_ops.file.writer import LanceFileWriter, WrittenPage

__all__ = ["LanceFileWriter", "WrittenPage"]

try:  # the reader is developed separately; expose it once it exists
    from lance_ops.file.reader import LanceFileReader  # noqa: F401
except ImportError:  # pragma: no cover - only while reader.py is missing or incomplete
    pass
else:
    __all__.append("LanceFileReader")
