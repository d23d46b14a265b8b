"""The public ``.lance`` data file API, mirroring pylance's ``lance.file`` (ADR 0002).

``LanceFileReader`` opens files of every version (2.0, 2.1/2.2, legacy v0.1); ``LanceFileWriter``
writes 2.0 (default), 2.1, 2.2 or legacy 0.1 files. A face module: it re-exports
:mod:`lance_ops.format` and nothing inside lance_ops imports it.
"""
from lance_ops.format.registry import LanceFileReader, LanceFileWriter, open_file_reader
from lance_ops.format.writer import WrittenPage

__all__ = ["LanceFileReader", "LanceFileWriter", "WrittenPage", "open_file_reader"]
