"""Lance 2.0 data files: reader (with its schema layout and partial-read plans), page encoders and decoders."""
