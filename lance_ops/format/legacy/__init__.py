"""Legacy (v0.1) Lance data files: row groups of protobuf-described pages; reader, writer, page codecs."""
