"""The ``.lance`` data file container: footer, offset tables, column metadata, readers and writer.

``LanceFileReader`` opens files of every version (2.0, 2.1/2.2, legacy v0.1); ``LanceFileWriter``
writes 2.0 files.
"""
from lance_ops.format.registry import LanceFileReader, open_file_reader
from lance_ops.format.writer import LanceFileWriter, WrittenPage

__all__ = ["LanceFileReader", "LanceFileWriter", "WrittenPage", "open_file_reader"]
