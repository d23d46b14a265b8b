"""Value compression of Lance 2.1+: bit packing, FSST, byte-stream split, dictionaries, RLE, general compressors."""
